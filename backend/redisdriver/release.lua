-- ARGV: holder
-- Returns {permits freed (0 when the holder held no lease), holder, fence, ...}: the freed
-- permits go to the waiters at the head of the line (holder, fence each), whose Stores are told
-- on their channels.
local holder = ARGV[1]
purge()
local n = held(holder)
if not n then return {0} end
local head, reqs = peek()
redis.call('ZREM', leases, holder)
redis.call('HDEL', holders, holder)
local out = handoff(head, reqs)
table.insert(out, 1, n)
return out
