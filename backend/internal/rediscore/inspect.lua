-- No ARGV. Returns {limit, number of leases, holder, permits, fence, ttl_ms, value, ...,
-- holder, permits, value, ...}: the unexpired leases, then the line's places whose wait has not
-- ended, head first. It writes nothing.
local out = {tonumber(redis.call('HGET', meta, 'limit') or '0'), 0}
local live = redis.call('ZRANGEBYSCORE', leases, '(' .. now_ms, '+inf', 'WITHSCORES')
for i = 1, #live, 2 do
  local n, fence, _, value = held(live[i])
  if n then
    out[#out + 1] = live[i]
    out[#out + 1] = n
    out[#out + 1] = fence
    out[#out + 1] = tonumber(live[i + 1]) - now_ms
    out[#out + 1] = value
    out[2] = out[2] + 1
  end
end
local line = redis.call('ZRANGE', queue, 0, -1)
for i = 1, #line, 1000 do
  local reqs = redis.call('HMGET', waiting, unpack(line, i, math.min(i + 999, #line)))
  for j = 1, #reqs do
    if reqs[j] then
      local n, deadline, _, _, _, _, value = request(reqs[j])
      if deadline > now_ms then
        out[#out + 1] = line[i + j - 1]
        out[#out + 1] = n
        out[#out + 1] = value
      end
    end
  end
end
return out
