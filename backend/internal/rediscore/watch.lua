-- ARGV: life_ms
-- Some Store watches the key for life_ms more: until then every script that grants a new lease,
-- releases one or gives one back publishes on the key's changed channel. The deadline is the
-- holders hash's entry '' (see the header); holders, and leases with it, live at least as long,
-- so that holders never outlives leases with a lease in it. Returns 1.
local life = tonumber(ARGV[1])
local until_ms = now_ms + life
local _, cur = split(redis.call('HGET', holders, '') or '0 0')
if (cur or 0) < until_ms then
  redis.call('HSET', holders, '', '0 ' .. int(until_ms))
end
for _, k in ipairs({holders, leases}) do
  local p = redis.call('PTTL', k)
  if p ~= -2 and p < life then redis.call('PEXPIRE', k, life) end
end
return 1
