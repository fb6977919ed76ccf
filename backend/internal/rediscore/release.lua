-- release: PARAMS are holder and fence (absent or 0: whatever the holder's lease's fence).
-- Returns {permits freed (0 when the holder held no lease with that fence), holder, fence, ...}:
-- the freed permits go to the waiters at the head of the line (holder, fence each), whose Stores
-- are told on their channels; when the line was granted nothing, the permits freed alone (a
-- number, which costs the server less than an array).

-- release_lone ends the holder's lone lease (see common.lua) at the fence asked for: TIME, GET and
-- a DEL, and, while the fence is at or above the clock (a Redlock node's), a PSETEX of the fence
-- alone until the clock passes it (the lease's expiry is the key's, so its being there says it
-- is held). Nothing held: 0. A hash goes the other tiers' way, after the GET.
local function release_lone(PARAMS)
  local s = lone_read()
  if s == false then return 0 end
  if not s then return nil end
  local ft, h = lone_fields(s, true)
  if h ~= holder or (fence_asked and fence_asked ~= '0' and fence_asked ~= ft) then
    if ft then return 0 end
    return nil
  end
  if later(clock_us(), ft) then
    redis.call('DEL', state)
  else
    -- DEL first: out of memory, EVALSHA refuses PSETEX as a script's first write (but not after
    -- one), as the lease hash's release writes its keep entry after its HDEL.
    tick()
    redis.call('DEL', state)
    redis.call('PSETEX', state, to_ms(tonumber(ft)) - now_ms + 1, LONE_TAG .. ft)
  end
  return 1
end

-- release_fast ends the holder's lease when it is there, unexpired and at the fence asked for,
-- every other lease is unexpired, every counter is one of ours, and none says that the line or a
-- watch lives: one HDEL of its entry, without decoding the rest of the state. When it was the
-- last lease the key is left idle, and settle's work is done here: the hash is deleted (an HDEL of
-- every entry), or, under a fence at or above the clock (a Redlock node's), replaced by the fence
-- alone, the lone lease's string (see common.lua), until the clock passes the fence. (The last
-- lease with a left try alive, whose hash settle keeps as long again as the try needs, goes the
-- general way.) It compares numbers as texts (see later).
local function release_fast(all, PARAMS)
  local me = ':' .. holder
  local ms, us = clock_text()
  local e, fence, limit, keep, alone, tries = nil, nil, nil, nil, true, false
  for i = 1, #all, 2 do
    local f, v = all[i], all[i + 1]
    if f == me then
      e = v
    elseif f == 'fence' then
      fence = v
    elseif f == KEEP_ENTRY then
      keep = v
    elseif f == 'limit' then
      limit = v
    elseif f == 'line' or f == 'watch' or f == 'left' or f == 'seq' then
      if not plain(v) or (f ~= 'seq' and f ~= 'left' and later(v, ms)) then return nil end
      if f == 'left' then tries = later(v, ms) end
    elseif string.byte(f) == 58 then -- another holder's lease, which the general path would delete if expired
      local exp = string.match(v, '^%d+ %d+ (%d+)')
      if not (exp and later(exp, ms)) then return nil end
      alone = false
    else
      return nil
    end
  end
  if not (e and keep and plain3(fence, limit, keep)) or (alone and tries) then return nil end
  local n, ft, exp = string.match(e, '^(%d+) (%d+) (%d+)')
  if not (n and later(exp, ms)) or (fence_asked and fence_asked ~= '0' and fence_asked ~= ft) then
    return nil
  end
  if not alone then
    redis.call('HDEL', state, me)
  elseif fence and not later(us, fence) then
    -- The fence is at or above the clock (a Redlock node's): it stays, alone, as a lone lease's
    -- does (release_lone), until the clock passes it, so that the key's next pairs take the
    -- lone tiers again. DEL first (see release_lone).
    tick()
    redis.call('DEL', state)
    redis.call('PSETEX', state, to_ms(tonumber(fence)) - now_ms + 1, LONE_TAG .. fence)
  elseif limit and #all == 8 then
    redis.call('HDEL', state, me, 'fence', 'limit', KEEP_ENTRY)
  else
    redis.call('HDEL', state, me, 'fence', 'limit', 'seq', 'watch', 'line', 'left', KEEP_ENTRY)
  end
  if n == '1' then return 1 end
  return tonumber(n)
end

-- release is the general path (see release_fast).
local function release(all, PARAMS)
  load(all)
  local want = tonumber(fence_asked or 0)
  local l = leases[':' .. holder]
  if not l or (want ~= 0 and l.fence ~= want) then return 0 end
  drop(':' .. holder)
  changed()
  local out = serve(2) -- a Mutex's release: the head it grants, and the next, who waits
  if not out or #out == 0 then return l.n end
  table.insert(out, 1, l.n)
  return out
end
