-- ARGV: holder, permits, limit, ttl_ms, min_fence, wait_ms, channel (of the holder's Store),
-- fence_floor (a least fence for a new grant only)
-- Returns {1, fence} granted; {0, retry_after_ms, last_fence} refused; {-1, permits_held} when
-- the holder already holds a different number of permits. A refusal with wait_ms > 0 keeps the
-- holder's place in the line of waiters, where a release may grant it the lease.
local holder, n, limit, ttl = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local min_fence, wait_ms = tonumber(ARGV[5]), tonumber(ARGV[6])
local last = tonumber(redis.call('HGET', meta, 'fence') or '0')
purge()
local cur, cur_fence, in_use, fresh = census(holder)
if cur then
  if cur ~= n then return {-1, cur} end
  redis.call('ZADD', leases, now_ms + ttl, holder)
  redis.call('HSET', meta, 'limit', limit)
  if min_fence > cur_fence then
    cur_fence = min_fence
    redis.call('HSET', holders, holder, n .. ' ' .. int(cur_fence))
    redis.call('HSET', meta, 'fence', int(math.max(last, min_fence)))
  end
  stretch(ttl, false)
  return {1, cur_fence}
end
local new_min = math.max(min_fence, tonumber(ARGV[8]) or 0)
if in_use + n > limit then
  if wait_ms > 0 then enqueue(holder, n, limit, ttl, new_min, wait_ms, ARGV[7]) end
  local need = in_use + n - limit
  local by_expiry = redis.call('ZRANGE', leases, 0, -1, 'WITHSCORES')
  for i = 1, #by_expiry, 2 do
    need = need - held(by_expiry[i])
    if need <= 0 then return {0, tonumber(by_expiry[i + 1]) - now_ms, last} end
  end
  return {0, 0, last}
end
return {1, grant(holder, n, limit, ttl, new_min, last, fresh)}
