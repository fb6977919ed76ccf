-- watch has the key's changes announced for p_for microseconds from now (at least).
CREATE FUNCTION @watch(p_key bytea, p_for bigint) RETURNS void LANGUAGE plpgsql
SET enable_seqscan = off SET enable_bitmapscan = off AS $$
DECLARE
    v_kh bytea := sha256(p_key);
    k @keys;
BEGIN
    k := @lockkey(v_kh, p_key);
    UPDATE @keys SET watched_until = greatest(watched_until, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint + p_for) WHERE kh = v_kh;
END
$$;
