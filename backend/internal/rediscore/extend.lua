-- ARGV: holder, ttl_ms
-- Extending a grant the line made takes it, as the holder's Acquire would.
-- Returns {1, permits, fence, limit, value}, or {0} when the holder holds no unexpired lease.
load(all)
local me, ttl = ':' .. ARGV[1], tonumber(ARGV[2])
local l = leases[me]
if not l then return {0} end
-- A grant from the line, extended (adopted), is taken: no leave gives it back.
l.exp, l.q = now_ms + ttl, false
keep(ttl)
put(me, l)
return {1, l.n, l.fence, meta.limit, l.value}
