-- ARGV: holder, floor, [try id ('': none), its hold in ms, [leave id]]
-- A waiter gives up: it leaves the line, and a lease the line granted it that it has not taken
-- (with a fence above floor, the key's last fence at its refusal) passes to the next waiters.
-- With a try id (a try whose caller gave up before its reply came), that try, should it arrive
-- after this leave, takes no place for the next hold ms. With a leave id, a leave that a later
-- try of the holder overtook (an acquire that named it: see acquire.lua) does nothing but keep
-- its own try out: the place and the grant are the later try's now.
-- Returns {holder, fence, ...} as release does.
load(all)
local holder, floor = ARGV[1], tonumber(ARGV[2])
-- The try it gives up is kept out even when the leave itself is (that try is no newer try's).
if #ARGV >= 4 and ARGV[3] ~= '' then hold_left(ARGV[3], tonumber(ARGV[4])) end
if ARGV[5] and meta.left > now_ms and redis.call('ZSCORE', left, ARGV[5]) then
  return {}
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
