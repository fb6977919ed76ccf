-- ARGV: holder, fence (0: whatever the holder's lease's fence), changed channel
-- Returns {permits freed (0 when the holder held no lease with that fence), holder, fence, ...}:
-- the freed permits go to the waiters at the head of the line (holder, fence each), whose Stores
-- are told on their channels.
local me, want = ':' .. ARGV[1], tonumber(ARGV[2])
local l = leases[me]
if not l or (want ~= 0 and l.fence ~= want) then return {0} end
drop(me)
changed()
local out = serve()
if not out then return {l.n} end
table.insert(out, 1, l.n)
return out
