-- ARGV: holder, floor
-- A waiter gives up: it leaves the line, and a lease the line granted it that it has not taken
-- (with a fence above floor, the key's last fence at its refusal) passes to the next waiters.
-- Returns {holder, fence, ...} as release does.
local holder, floor = ARGV[1], tonumber(ARGV[2])
purge()
unqueue(holder)
local n, fence, untaken = held(holder)
if n and untaken and fence > floor then
  drop(holder)
end
return serve()
