-- ARGV: holder, floor, [try id, its hold in ms]
-- A waiter gives up: it leaves the line, and a lease the line granted it that it has not taken
-- (with a fence above floor, the key's last fence at its refusal) passes to the next waiters.
-- With a try id (a try whose caller gave up before its reply came), that try, should it arrive
-- after this leave, takes no place for the next hold ms.
-- Returns {holder, fence, ...} as release does.
load(all)
local holder, floor = ARGV[1], tonumber(ARGV[2])
if #ARGV >= 4 then
  local hold = tonumber(ARGV[4])
  redis.call('ZREMRANGEBYSCORE', left, '-inf', now_ms)
  redis.call('ZADD', left, now_ms + hold, ARGV[3])
  if meta.left < now_ms + hold then
    redis.call('PEXPIRE', left, hold)
    setm('left', now_ms + hold)
    keep(hold)
  end
end
-- Even when the line's time is up (its keys expire then, by Redis's clock, which may run a
-- moment behind TIME): the place goes now.
unqueue(holder)
local l = leases[':' .. holder]
if l and l.q and l.fence > floor then
  drop(':' .. holder)
  changed()
end
return serve(64) or {}
