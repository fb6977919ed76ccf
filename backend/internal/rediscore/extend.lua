-- ARGV: holder, ttl_ms
-- Extending a grant the line made takes it, as the holder's Acquire would. The lease keeps its
-- lock delay, and the lease hash lives until the delay would end. A lease in its lock delay is
-- not held: {0}.
-- Returns {1, permits, fence, limit, value}, or {0} when the holder holds no unexpired lease.
local me, ttl = ':' .. ARGV[1], tonumber(ARGV[2])
-- The common path: the holder's lease is there and unexpired, every other lease is one of ours
-- and unexpired, and every counter is one of ours: one HSET of the holder's entry (and the
-- hash's keep and expiry, as keep does), without decoding the rest of the state. (An expired
-- lease the general path deletes, and an entry not ours it reports, untouched; an extend
-- tells no watcher and serves no line, so a live line or watch changes nothing here.)
local entry, fast, limit, until_ms = scan(all, me, false)
if entry and fast then
  -- The entry is written back as the general path's encode would: permits and fence as they
  -- are when they are whole decimals it would print the same (no leading zero, below 2^53).
  local nt, ft, exp, _, d, value = string.match(entry, '^(%d+) (%d+) (%d+)( ?q?)%+?(%d*)\n?(.*)$')
  local n, fence = tonumber(nt), tonumber(ft)
  local ok = n and fence and tonumber(exp) > now_ms and string.byte(nt) ~= 48 and string.byte(ft) ~= 48 and
    n < 9007199254740992 and fence < 9007199254740992
  -- The lock delay likewise, and the general path when encode would not print it the same.
  if ok and d ~= '' then ok = #d <= 15 and string.byte(d) ~= 48 end
  if ok then
    local e, life = nt .. ' ' .. ft .. ' ' .. int(now_ms + ttl), ttl
    if d ~= '' then e, life = e .. '+' .. d, ttl + tonumber(d) end
    if value ~= '' then e = e .. '\n' .. value end
    if lasts(until_ms, life) then
      redis.call('HSET', state, me, e)
    else
      life = kept(life)
      redis.call('HSET', state, me, e, KEEP_ENTRY, int(now_ms + life))
      redis.call('PEXPIRE', state, life)
    end
    return {1, n, fence, limit, value}
  end
end
load(all)
local l = leases[me]
if not l then return {0} end
-- A grant from the line, extended (adopted), is taken: no leave gives it back.
l.exp, l.q = now_ms + ttl, false
keep(ttl + l.d)
put(me, l)
return {1, l.n, l.fence, meta.limit, l.value}
