-- inspect: no PARAMS. Returns {the key's limit (see held_limit), number of leases, number of
-- delayed leases, holder, permits, fence, ttl_ms, value, ..., holder, permits, fence, left_ms, ...,
-- holder, permits, value, ...}: the unexpired leases, then the expired ones whose lock delay has
-- not ended (left_ms until it does), then the line's places whose wait has not ended, head first.
-- It writes nothing.
local function inspect(all, PARAMS)
  load(all)
  local out = {held_limit() or meta.limit, 0, 0}
  for f, l in pairs(leases) do
    out[#out + 1] = string.sub(f, 2)
    out[#out + 1] = l.n
    out[#out + 1] = l.fence
    out[#out + 1] = l.exp - now_ms
    out[#out + 1] = l.value
    out[2] = out[2] + 1
  end
  for f, l in pairs(delays) do
    out[#out + 1] = string.sub(f, 2)
    out[#out + 1] = l.n
    out[#out + 1] = l.fence
    out[#out + 1] = l.exp + l.d - now_ms
    out[3] = out[3] + 1
  end
  local line = {}
  if line_live() then line = redis.call('ZRANGE', queue, 0, -1) end
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
end
