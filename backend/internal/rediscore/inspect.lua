-- No ARGV. Returns {limit, holder, permits, fence, ttl_ms, ...} over the unexpired leases.
-- It writes nothing.
local out = {tonumber(redis.call('HGET', meta, 'limit') or '0')}
local live = redis.call('ZRANGEBYSCORE', leases, '(' .. now_ms, '+inf', 'WITHSCORES')
for i = 1, #live, 2 do
  local n, fence = held(live[i])
  if n then
    out[#out + 1] = live[i]
    out[#out + 1] = n
    out[#out + 1] = fence
    out[#out + 1] = tonumber(live[i + 1]) - now_ms
  end
end
return out
