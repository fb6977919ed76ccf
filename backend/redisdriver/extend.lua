-- ARGV: holder, ttl_ms
-- Returns {1, permits, fence, limit}, or {0} when the holder holds no unexpired lease.
local holder, ttl = ARGV[1], tonumber(ARGV[2])
purge()
local n, fence = held(holder)
if not n then return {0} end
redis.call('ZADD', leases, 'XX', now_ms + ttl, holder)
stretch(ttl, false)
return {1, n, fence, tonumber(redis.call('HGET', meta, 'limit') or '0')}
