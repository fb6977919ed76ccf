-- ARGV: holder, ttl_ms
-- Extending a grant the line made takes it, as the holder's Acquire would.
-- Returns {1, permits, fence, limit, value}, or {0} when the holder holds no unexpired lease.
local holder, ttl = ARGV[1], tonumber(ARGV[2])
purge()
local n, fence, untaken, value = held(holder)
if not n then return {0} end
if untaken then
  -- A grant from the line, extended (adopted): it is taken, and no leave gives it back.
  redis.call('HSET', holders, holder, int(n) .. ' ' .. int(fence) .. tail('', value))
end
redis.call('ZADD', leases, 'XX', now_ms + ttl, holder)
stretch(ttl, false)
return {1, n, fence, tonumber(redis.call('HGET', meta, 'limit') or '0'), value}
