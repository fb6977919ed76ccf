-- ARGV: holder, channel, claim_ms
-- Returns {permits freed (0 when the holder held no lease), wake id, woken holder...}: the freed
-- permits are reserved for the waiters at the head of the line, who are told on the channel.
local holder = ARGV[1]
purge()
local n, fence = held(holder)
if not n or fence == 0 then
  keepalive()
  return {0}
end
redis.call('ZREM', leases, holder)
redis.call('HDEL', holders, holder)
local out = wake(ARGV[2], tonumber(ARGV[3]))
keepalive()
table.insert(out, 1, n)
return out
