-- ARGV: holder, floor
-- A waiter gives up: it leaves the line, and a lease the line granted it after its last
-- refusal (a fence above floor, the key's last fence then) passes to the next waiters.
-- Returns {holder, fence, ...} as release does.
local holder, floor = ARGV[1], tonumber(ARGV[2])
purge()
unqueue(holder)
local n, fence = held(holder)
local out = {}
if n and fence > floor then
  local head, reqs = peek()
  redis.call('ZREM', leases, holder)
  redis.call('HDEL', holders, holder)
  out = handoff(head, reqs)
end
return out
