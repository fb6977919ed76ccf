-- acquire: PARAMS are holder, ttl_ms, then, each absent when it and all after it are their
-- default: wait_ms (0), try id (try; '': none; names this try to a leave that may overtake it,
-- and, when the try waits, its Store, whose channel hears of a grant from the line: see
-- granted_channel), listens ('0'; '1' when a PUBLISH on that channel counts the holder's Store
-- while it listens), permits and limit ('1' each; whole decimals as strconv writes them: they are
-- stored as sent), value ('': kept with the lease, and with the place in the line), min_fence (0),
-- fence_floor (0: a least fence for a new grant only), lock_delay in ms (absent: none; kept with
-- the lease, and with the place in the line, whose grant gets it), overtakes, the ids of the
-- holder's leaves that this try overtakes (space-separated; absent: none): leaves sent before it
-- whose replies did not come, and which may still arrive after it; each is kept from doing
-- anything when it does (see leave.lua), for hold_ms. So an uncontended try of a lock sends the
-- server only what it needs: two values, four when it would wait.
-- Returns the fence granted (a number: a reply of one integer costs the server less than an
-- array); {0, retry_after_ms, last_fence} refused; {-1, permits_held} when
-- the holder already holds a different number of permits; {-2, the key's limit} when limit is
-- not the key's (that of its unexpired leases, or of its waiters when it has none), and then it
-- writes nothing. The line is strictly FIFO: free permits go to the waiters in line first, and a
-- caller not served from it is granted only when nobody waits. A refusal with wait_ms > 0 keeps
-- the holder's place in the line (or gives it the last one), where a release may grant it the
-- lease. Permits an expired lease's lock delay keeps closed count as held until the delay ends;
-- its holder's own request is refused until then, its retry_after_ms the delay's end.

-- acquire_lone grants a key that holds nothing, or a lone lease's fence alone (see common.lua), a
-- lone lease, to a try for one permit of a limit of 1, with no lock delay, that overtakes no
-- leave, and whose fence (the clock, or a floor or the last fence above it) the clock passes
-- before the lease ends: TIME, GET and one PSETEX. Any other try it leaves to the other tiers
-- without reading the key; a key that holds something else, after its GET.
local function acquire_lone(PARAMS)
  if overtakes or (permits and permits ~= '1') or (limit and limit ~= '1') or (lock_delay and lock_delay ~= '0') then
    return nil
  end
  local s = lone_read()
  local last
  if s then
    local ft, h = lone_fields(s, true)
    if h ~= false then return nil end -- held, or not ours: the other tiers decide
    last = ft
  elseif s == nil then
    return nil
  end
  local ft = clock_us()
  if min_fence or last then
    tick()
    local fence = math.max(now_us, tonumber(min_fence or 0), tonumber(fence_floor or 0), last and tonumber(last) + 1 or 0)
    if fence > now_us then
      if to_ms(fence) + LONE_SLACK > now_ms + tonumber(ttl_ms) then return nil end
      ft = int(fence)
    end
  end
  redis.call('PSETEX', state, ttl_ms, LONE_TAG .. ft .. ' ' .. #holder .. ' ' .. holder .. (value or ''))
  return tonumber(ft)
end

-- acquire_fast grants a key that holds no lease (expired or not), and whose counters, if it has
-- a hash, are ours and say that no line, watch or left try lives, to a try that overtakes no
-- leave (the general path records those) and asks no more permits than its limit: the grant the
-- general path would make, one HSET of the lease and the counters fence and limit (and the keep
-- entry and a PEXPIRE when the hash would not last: hset_kept), without decoding the state. No
-- lease holds the key, so any limit is its own.
local function acquire_fast(all, PARAMS)
  if overtakes then return nil end
  local nt, lt = permits or '1', limit or '1'
  if nt ~= lt and tonumber(nt) > tonumber(lt) then return nil end
  tick()
  local last, until_ms = 0, 0
  if #all > 0 then
    local fence, lim, keep
    for i = 1, #all, 2 do
      local f, v = all[i], all[i + 1]
      if f == 'fence' then
        fence = v
      elseif f == KEEP_ENTRY then
        keep = v
      elseif f == 'limit' then
        lim = v
      elseif f == 'line' or f == 'watch' or f == 'left' or f == 'seq' then
        if not plain(v) or (f ~= 'seq' and tonumber(v) > now_ms) then return nil end
      else
        return nil -- a lease, or an entry not ours: the general path reads it
      end
    end
    if not (keep and plain3(fence, lim, keep)) then return nil end
    last, until_ms = fence and tonumber(fence) or 0, tonumber(keep)
  end
  local ttl, d, dt = tonumber(ttl_ms), 0, nil
  local fence = now_us
  if last >= fence then fence = last + 1 end
  if min_fence then fence = math.max(fence, tonumber(min_fence), tonumber(fence_floor or 0)) end
  if lock_delay then d = tonumber(lock_delay) end
  if d > 0 then dt = int(d) end
  local ft = int(fence)
  hset_kept(until_ms, fenced(ttl + d, fence), ':' .. holder, entry(nt, ft, int(now_ms + ttl), false, dt, value), ft, lt)
  return fence
end

-- acquire is the general path (see acquire_fast).
local function acquire(all, PARAMS)
  local ttl, wait, n, lim = tonumber(ttl_ms), tonumber(wait_ms or 0), tonumber(permits or 1), tonumber(limit or 1)
  local nt, lt, least, floor = permits or '1', limit or '1', tonumber(min_fence or 0), tonumber(fence_floor or 0)
  local d = tonumber(lock_delay or 0)
  try, value, listens = try or '', value or '', listens or '0'
  load(all)
  local held = held_limit()
  if held and held ~= lim then
    -- Clients disagree on the key's limit: refused at once, with no place and nothing written
    -- but the leaves it overtakes kept out (written after the writes are dropped, or they would go
    -- with them).
    writes = nil
    if overtakes then overtake(overtakes, tonumber(hold_ms)) end
    return {-2, held}
  end
  if overtakes then overtake(overtakes, tonumber(hold_ms)) end
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
    if least > cur.fence then
      cur.fence, cur.ft = least, nil
      if least > meta.fence then setm('fence', least) end
    end
    cur.exp, cur.q, cur.d, cur.value = now_ms + ttl, false, d, value
    setm('limit', lim, lt)
    keep(fenced(ttl + d, cur.fence))
    put(me, cur)
    return cur.fence
  end
  local gone = delays[me]
  if gone then
    -- The holder's lease expired unreleased, and its lock delay lasts: the holder waits it out like
    -- anyone (its place, if it waits, is not served until then).
    if wait > 0 then
      enqueue(holder, n, lim, ttl, math.max(least, floor), wait, listens,
        {value = value, delay = d, channel = granted_channel(try)})
    end
    return {0, gone.exp + gone.d - now_ms, meta.fence}
  end
  if used + n > lim or not line_empty then
    if wait > 0 then
      enqueue(holder, n, lim, ttl, math.max(least, floor), wait, listens,
        {value = value, delay = d, channel = granted_channel(try)})
    end
    -- With room but others ahead, the first expiry is the next change that expiry alone brings.
    -- A lease frees its permits, by expiry alone, when its lock delay ends after its expiry.
    local need, by_expiry = math.max(used + n - lim, 1), {}
    for _, l in pairs(leases) do by_expiry[#by_expiry + 1] = l end
    for _, l in pairs(delays) do by_expiry[#by_expiry + 1] = l end
    if #by_expiry > 1 then table.sort(by_expiry, sooner) end
    for _, l in ipairs(by_expiry) do
      need = need - l.n
      if need <= 0 then return {0, l.exp + l.d - now_ms, meta.fence} end
    end
    return {0, 0, meta.fence}
  end
  local fence = grant(holder, n, lim, ttl, d, math.max(least, floor), false, value, false, nt, lt)
  changed()
  return fence
end
