-- ARGV: holder, permits, limit, ttl_ms, min_fence, wait_ms, channel (of the holder's Store),
-- fence_floor (a least fence for a new grant only), listens (1 when a PUBLISH on channel counts
-- the holder's Store while it listens), try id (names this try to a leave that may overtake it;
-- '' for none), value (kept with the lease, and with the place in the line), changed channel
-- Returns {1, fence} granted; {0, retry_after_ms, last_fence} refused; {-1, permits_held} when
-- the holder already holds a different number of permits. The line is strictly FIFO: free
-- permits go to the waiters in line first, and a caller not served from it is granted only when
-- nobody waits. A refusal with wait_ms > 0 keeps the holder's place in the line (or gives it the
-- last one), where a release may grant it the lease.
local holder, n, limit, ttl = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
if ARGV[10] ~= '' and redis.call('ZSCORE', left, ARGV[10]) then
  -- Its caller gave up on this try before it arrived, and left: nothing to grant, no place.
  return {0, 0, 0}
end
local min_fence, wait_ms, value = tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[11]
purge()
local _, line_empty = serve()
-- One read of holders: the holder's lease, the permits all leases hold, and the watch entry.
local cur, cur_fence, in_use, fresh = census(holder)
if cur then
  -- Held already, or granted from the line just now or before: granted again, and taken.
  if cur ~= n then return {-1, cur} end
  redis.call('ZADD', leases, now_ms + ttl, holder)
  redis.call('HSET', meta, 'limit', int(limit))
  if min_fence > cur_fence then
    cur_fence = min_fence
    redis.call('HSET', meta, 'fence', int(math.max(tonumber(redis.call('HGET', meta, 'fence') or '0'), min_fence)))
  end
  redis.call('HSET', holders, holder, int(n) .. ' ' .. int(cur_fence) .. tail('', value))
  stretch(ttl, false)
  return {1, cur_fence}
end
local last = tonumber(redis.call('HGET', meta, 'fence') or '0')
if in_use + n > limit or not line_empty then
  if wait_ms > 0 then
    enqueue(holder, n, limit, ttl, math.max(min_fence, tonumber(ARGV[8]) or 0), wait_ms, ARGV[9] or '0',
      {value = value, channel = ARGV[7]})
  end
  -- With room but others ahead, the first expiry is the next change that expiry alone brings.
  local need = math.max(in_use + n - limit, 1)
  local by_expiry = redis.call('ZRANGE', leases, 0, -1, 'WITHSCORES')
  for i = 1, #by_expiry, 2 do
    need = need - held(by_expiry[i])
    if need <= 0 then return {0, tonumber(by_expiry[i + 1]) - now_ms, last} end
  end
  return {0, 0, last}
end
local fence = grant(holder, n, limit, ttl, math.max(min_fence, tonumber(ARGV[8]) or 0), last, fresh, tail('', value), false)
changed()
return {1, fence}
