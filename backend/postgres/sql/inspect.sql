-- inspect is core.Store.Inspect: its unexpired leases by fence (kind 0) with the key's row's
-- limit, then the places in its line whose wait has not ended, head first (kind 1), each with
-- its limit, then the row's limit (kind 2), then the expired leases whose lock delay lasts, by
-- fence, with the time left until it ends in ttl (kind 3). It changes nothing.
CREATE FUNCTION @inspect(p_key bytea)
RETURNS TABLE (kind integer, lim integer, holder bytea, permits integer, fence bigint,
               ttl bigint, value bytea)
LANGUAGE plpgsql STABLE
SET enable_seqscan = off SET enable_bitmapscan = off AS $$
DECLARE
    v_kh bytea := sha256(p_key);
    now_ bigint := (extract(epoch FROM clock_timestamp()) * 1000000)::bigint;
BEGIN
    RETURN QUERY
        SELECT CASE WHEN l.expires > now_ THEN 0 ELSE 3 END, k.lim, l.holder, l.permits, l.fence,
               CASE WHEN l.expires > now_ THEN l.expires - now_ ELSE l.expires + l.delay - now_ END, l.value
        FROM @keys k JOIN @leases l ON l.kh = k.kh
        WHERE k.kh = v_kh AND l.expires + l.delay > now_
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
