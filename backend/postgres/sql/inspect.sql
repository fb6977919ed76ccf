-- inspect is core.Store.Inspect: its unexpired leases by fence (kind 0) with the key's row's
-- limit, then the places in its line whose wait has not ended, head first (kind 1), each with
-- its limit, then the row's limit (kind 2). It changes nothing.
CREATE OR REPLACE FUNCTION @inspect(p_key bytea)
RETURNS TABLE (kind integer, lim integer, holder bytea, permits integer, fence bigint,
               ttl bigint, value bytea)
LANGUAGE plpgsql STABLE
SET enable_seqscan = off SET enable_bitmapscan = off AS $$
DECLARE
    v_kh bytea := sha256(p_key);
    now_ bigint := (extract(epoch FROM clock_timestamp()) * 1000000)::bigint;
BEGIN
    RETURN QUERY
        SELECT 0, k.lim, l.holder, l.permits, l.fence, l.expires - now_, l.value
        FROM @keys k JOIN @leases l ON l.kh = k.kh
        WHERE k.kh = v_kh AND l.expires > now_
        UNION ALL
        SELECT 1, w.lim, w.holder, w.permits, w.seq, 0::bigint, w.value
        FROM @keys k JOIN @waiters w ON w.kh = k.kh
        WHERE k.kh = v_kh AND w.deadline > now_
        UNION ALL
        SELECT 2, k.lim, NULL::bytea, 0, 0::bigint, 0::bigint, NULL::bytea
        FROM @keys k WHERE k.kh = v_kh
        ORDER BY 1, 5;
END
$$;
