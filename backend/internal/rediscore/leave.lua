-- leave: PARAMS are holder, floor, then, each absent when it and all after it are: the try id
-- (try; '': none), its hold_ms, and the leave's own id (leave_id).
-- A waiter gives up: it leaves the line, and a lease the line granted it that it has not taken
-- (with a fence above floor, the key's last fence at its refusal) passes to the next waiters.
-- With a try id (a try whose caller gave up before its reply came), that try, should it arrive
-- after this leave, takes no place for the next hold_ms. With a leave id, a leave that a later
-- try of the holder overtook (an acquire that named it: see acquire.lua) does nothing but keep
-- its own try out: the place and the grant are the later try's now.
-- Returns {holder, fence, ...} as release does.
local function leave(all, PARAMS)
  load(all)
  floor = tonumber(floor)
  -- The try it gives up is kept out even when the leave itself is (that try is no newer try's).
  if hold_ms and try ~= '' then hold_left(try, tonumber(hold_ms)) end
  if leave_id and meta.left > now_ms and redis.call('ZSCORE', left, leave_id) then
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
end
