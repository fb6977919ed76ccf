-- ARGV: holder, [fence] (absent or 0: whatever the holder's lease's fence)
-- Returns {permits freed (0 when the holder held no lease with that fence), holder, fence, ...}:
-- the freed permits go to the waiters at the head of the line (holder, fence each), whose Stores
-- are told on their channels; when the line was granted nothing, the permits freed alone (a
-- number, which costs the server less than an array).
local me, want = ':' .. ARGV[1], tonumber(ARGV[2] or 0)
-- The uncontended path: the holder's lease is there, with the fence asked for, every other
-- lease is one of ours and unexpired, and no counter says that the line or a watch lives: one
-- HDEL, without decoding the rest of the state; of all its entries, which deletes the hash, when
-- it was the last lease, as settle would. (An expired lease the general path deletes, and an
-- entry not ours it reports, untouched; the last lease under a fence at or above the clock, or
-- with a left try alive, whose hash settle keeps until the clock passes the fence, or as long
-- again as the try needs, goes the general path.)
local entry, fast, _, _, alone, tries, raised = scan(all, me, true)
if entry and fast and not (alone and (tries or raised)) then
  local n, fence, exp = string.match(entry, '^(%d+) (%d+) (%d+)')
  if n and tonumber(exp) > now_ms and (want == 0 or tonumber(fence) == want) then
    if alone then
      redis.call('HDEL', state, me, 'fence', 'limit', 'seq', 'watch', 'line', 'left', KEEP_ENTRY)
    else
      redis.call('HDEL', state, me)
    end
    return tonumber(n)
  end
end
load(all)
local l = leases[me]
if not l or (want ~= 0 and l.fence ~= want) then return 0 end
drop(me)
changed()
local out = serve(2) -- a Mutex's release: the head it grants, and the next, who waits
if not out or #out == 0 then return l.n end
table.insert(out, 1, l.n)
return out
