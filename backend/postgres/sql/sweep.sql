-- sweep removes what its operations left behind on keys nobody uses any more, when no Store
-- swept in the last p_every microseconds: left rows past their minute, places in a line that
-- can take no grant (see live; the line is served after them), and then the rows of keys with
-- nothing left in them (forget): those whose leases expired unreleased (and whose lock delays
-- ended), whose watch lapsed, whose raised fence the clock has passed, or whose places were
-- dead. Each kind is bounded by p_batch rows. It reports whether it ran and how many rows of
-- each kind it removed. A key locked by an operation is skipped, for the next sweep.
CREATE FUNCTION @sweep(p_every bigint, p_batch integer,
    OUT ran boolean, OUT keys integer, OUT places integer, OUT tries integer)
LANGUAGE plpgsql
SET enable_seqscan = off SET enable_bitmapscan = off AS $$
DECLARE
    now_ bigint := (extract(epoch FROM clock_timestamp()) * 1000000)::bigint;
    c bytea;
    k @keys;
    n integer;
BEGIN
    ran := false; keys := 0; places := 0; tries := 0;
    PERFORM 1 FROM @schema s WHERE s.swept <= now_ - p_every FOR UPDATE SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    UPDATE @schema SET swept = now_;
    ran := true;
    DELETE FROM @left WHERE ctid = ANY (ARRAY(SELECT x.ctid FROM @left x WHERE x.expires <= now_ LIMIT p_batch));
    GET DIAGNOSTICS tries = ROW_COUNT;
    FOR c IN
        (SELECT DISTINCT w.kh FROM @waiters w WHERE NOT @live(w, now_) LIMIT p_batch)
        UNION
        (SELECT x.kh FROM @keys x WHERE x.fence < now_ AND x.watched_until <= now_
            AND NOT EXISTS (SELECT 1 FROM @leases l WHERE l.kh = x.kh AND l.expires + l.delay > now_)
            AND NOT EXISTS (SELECT 1 FROM @waiters w WHERE w.kh = x.kh AND @live(w, now_))
         LIMIT p_batch)
    LOOP
        SELECT * INTO k FROM @keys x WHERE x.kh = c FOR UPDATE SKIP LOCKED;
        CONTINUE WHEN NOT FOUND;
        now_ := (extract(epoch FROM clock_timestamp()) * 1000000)::bigint;
        DELETE FROM @leases WHERE kh = c AND expires + delay <= now_;
        DELETE FROM @waiters w WHERE w.kh = c AND NOT @live(w, now_);
        GET DIAGNOSTICS n = ROW_COUNT;
        places := places + n;
        IF n > 0 AND EXISTS (SELECT 1 FROM @waiters WHERE kh = c) THEN
            k := @serve(k, now_);
        END IF;
        IF @forget(k, now_) THEN
            keys := keys + 1;
        END IF;
    END LOOP;
END
$$;
