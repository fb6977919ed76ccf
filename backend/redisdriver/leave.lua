-- ARGV: holder, channel, claim_ms
-- A waiter gives up: it leaves the line, and a reservation made for it passes to the next
-- waiters. Returns {wake id, woken holder...}, or {} when it woke nobody.
local holder = ARGV[1]
purge()
unqueue(holder)
local n, fence = held(holder)
local out = {}
if n and fence == 0 then
  redis.call('ZREM', leases, holder)
  redis.call('HDEL', holders, holder)
  out = wake(ARGV[2], tonumber(ARGV[3]))
end
keepalive()
return out
