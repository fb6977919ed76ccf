-- accept_fence records p_fence for the resource unless a higher one was accepted; it returns
-- the highest fence accepted before (0 for none). The row stays locked until the caller's
-- transaction ends.
CREATE FUNCTION @accept_fence(p_resource bytea, p_fence bigint, OUT accepted boolean,
    OUT highest bigint)
LANGUAGE plpgsql
SET enable_seqscan = off SET enable_bitmapscan = off AS $$
DECLARE
    v_rh bytea := sha256(p_resource);
BEGIN
    INSERT INTO @fences (rh, resource, fence) VALUES (v_rh, p_resource, p_fence)
    ON CONFLICT (rh) DO NOTHING;
    IF FOUND THEN
        accepted := true; highest := 0;
        RETURN;
    END IF;
    SELECT f.fence INTO highest FROM @fences f WHERE f.rh = v_rh FOR UPDATE;
    accepted := p_fence >= highest;
    IF accepted AND p_fence > highest THEN
        UPDATE @fences SET fence = p_fence WHERE rh = v_rh;
    END IF;
END
$$;
