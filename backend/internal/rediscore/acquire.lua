-- ARGV: holder, ttl_ms, then, each absent when it and all after it are their default: wait_ms
-- (0), try id ('': none; names this try to a leave that may overtake it, and, when the try
-- waits, its Store, whose channel hears of a grant from the line: see granted_channel), listens
-- ('0'; '1' when a PUBLISH on that channel counts the holder's Store while it listens), permits
-- and limit ('1' each; whole decimals as strconv writes them: they are stored as sent), value
-- ('': kept with the lease, and with the place in the line), min_fence (0), fence_floor (0: a
-- least fence for a new grant only), lock delay in ms (absent: none; kept with the lease, and with
-- the place in the line, whose grant gets it), then the ids of the holder's leaves that this try
-- overtakes (space-separated; absent: none): leaves sent before it whose replies did not come, and
-- which may still arrive after it; each is kept from doing anything when it does (see leave.lua),
-- for hold ms (the last argument). So an uncontended try of a lock sends the server only what it
-- needs: two values, four when it would wait.
-- Returns the fence granted (a number: a reply of one integer costs the server less than an
-- array); {0, retry_after_ms, last_fence} refused; {-1, permits_held} when
-- the holder already holds a different number of permits; {-2, the key's limit} when limit is
-- not the key's (that of its unexpired leases, or of its waiters when it has none), and then it
-- writes nothing. The line is strictly FIFO: free permits go to the waiters in line first, and a
-- caller not served from it is granted only when nobody waits. A refusal with wait_ms > 0 keeps
-- the holder's place in the line (or gives it the last one), where a release may grant it the
-- lease. Permits an expired lease's lock delay keeps closed count as held until the delay ends;
-- its holder's own request is refused until then, its retry_after_ms the delay's end.
local holder, ttl, wait_ms, try = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3] or 0), ARGV[4] or ''
local nt, lt, value = ARGV[6] or '1', ARGV[7] or '1', ARGV[8] or ''
local n, limit = tonumber(nt), tonumber(lt)
local min_fence, floor = tonumber(ARGV[9] or 0), tonumber(ARGV[10] or 0)
local d = tonumber(ARGV[11] or 0)
local overtakes = ARGV[12]
-- The uncontended path: a hash of counters alone, or none (no lease, expired or not), none of
-- them saying that the line, a watch or a left try lives: the grant the general path below would
-- make, written with one HSET, without decoding the state; a hash whose expiry is not far enough
-- (a new key, one whose last lease was released, or one whose keep this lease outlives) gets its
-- keep in the HSET and a PEXPIRE, as keep does. No lease holds the key, so any limit is its own.
if n <= limit then
  local last, until_ms, fast = 0, 0, not overtakes -- leaves to overtake: the general path records them
  local versioned = #all == 0 -- a new hash gets its keep entry below; any other must have ours
  for i = 1, #all, 2 do
    local f, x = all[i], counter(all[i + 1])
    if not x then
      fast = false -- a lease, or someone else's entry: the general path reads it
    elseif f == 'fence' then
      last = x
    elseif f == KEEP_ENTRY then
      until_ms, versioned = x, true
    elseif f == 'line' or f == 'watch' or f == 'left' then
      fast = fast and x <= now_ms
    elseif f ~= 'limit' and f ~= 'seq' then
      fast = false
    end
    if not fast then break end
  end
  if fast and versioned then
    local fence = math.max(last + 1, now_us, min_fence, floor)
    local ft, entry = int(fence), ''
    if value ~= '' then entry = '\n' .. value end
    if d > 0 then entry = '+' .. int(d) .. entry end
    entry = nt .. ' ' .. ft .. ' ' .. int(now_ms + ttl) .. entry
    local life = fenced(ttl + d, fence)
    if lasts(until_ms, life) then
      redis.call('HSET', state, ':' .. holder, entry, 'fence', ft, 'limit', lt)
    else
      life = kept(life)
      redis.call('HSET', state, ':' .. holder, entry, 'fence', ft, 'limit', lt, KEEP_ENTRY, int(now_ms + life))
      redis.call('PEXPIRE', state, life)
    end
    return fence
  end
end
load(all)
local held = held_limit()
if held and held ~= limit then
  -- Clients disagree on the key's limit: refused at once, with no place and nothing written
  -- but the leaves it overtakes kept out (written after the writes are dropped, or they would go
  -- with them).
  writes = nil
  if overtakes then overtake(overtakes, tonumber(ARGV[13])) end
  return {-2, held}
end
if overtakes then overtake(overtakes, tonumber(ARGV[13])) end
if try ~= '' and meta.left > now_ms and redis.call('ZSCORE', left, try) then
  -- Its caller gave up on this try before it arrived, and left: nothing to grant, no place.
  return {0, 0, 0}
end
local _, line_empty = serve(1) -- a refused try reads only the head
local me = ':' .. holder
local cur = leases[me]
if cur then
  -- Held already, or granted from the line just now or before: granted again, and taken.
  if cur.n ~= n then return {-1, cur.n} end
  if min_fence > cur.fence then
    cur.fence, cur.ft = min_fence, nil
    if min_fence > meta.fence then setm('fence', min_fence) end
  end
  cur.exp, cur.q, cur.d, cur.value = now_ms + ttl, false, d, value
  setm('limit', limit, lt)
  keep(fenced(ttl + d, cur.fence))
  put(me, cur)
  return cur.fence
end
local gone = delays[me]
if gone then
  -- The holder's lease expired unreleased, and its lock delay lasts: the holder waits it out like
  -- anyone (its place, if it waits, is not served until then).
  if wait_ms > 0 then
    enqueue(holder, n, limit, ttl, math.max(min_fence, floor), wait_ms, ARGV[5] or '0',
      {value = value, delay = d, channel = granted_channel(try)})
  end
  return {0, gone.exp + gone.d - now_ms, meta.fence}
end
if used + n > limit or not line_empty then
  if wait_ms > 0 then
    enqueue(holder, n, limit, ttl, math.max(min_fence, floor), wait_ms, ARGV[5] or '0',
      {value = value, delay = d, channel = granted_channel(try)})
  end
  -- With room but others ahead, the first expiry is the next change that expiry alone brings.
  -- A lease frees its permits, by expiry alone, when its lock delay ends after its expiry.
  local need, by_expiry = math.max(used + n - limit, 1), {}
  for _, l in pairs(leases) do by_expiry[#by_expiry + 1] = l end
  for _, l in pairs(delays) do by_expiry[#by_expiry + 1] = l end
  if #by_expiry > 1 then table.sort(by_expiry, sooner) end
  for _, l in ipairs(by_expiry) do
    need = need - l.n
    if need <= 0 then return {0, l.exp + l.d - now_ms, meta.fence} end
  end
  return {0, 0, meta.fence}
end
local fence = grant(holder, n, limit, ttl, d, math.max(min_fence, floor), false, value, false, nt, lt)
changed()
return fence
