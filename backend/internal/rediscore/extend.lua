-- extend: PARAMS are holder and ttl_ms. Extending a grant the line made takes it, as the holder's
-- Acquire would. The lease keeps its lock delay, and the lease hash lives until the delay would
-- end. A lease in its lock delay is not held: {0}.
-- Returns {1, permits, fence, limit, value}, or {0} when the holder holds no unexpired lease.

-- extend_lone renews the holder's lone lease (see common.lua): GET, PTTL and one PEXPIRE. The
-- clock passes the fence LONE_SLACK ms before the key's expiry at least (see acquire_lone), so a
-- later expiry keeps that true; an earlier one reads the clock (TIME) to check it. Nothing held:
-- {0}. A hash, or a new expiry before the clock passes the fence, goes the other tiers' way.
local function extend_lone(PARAMS)
  local s = lone_read()
  if s == false then return {0} end
  if not s then return nil end
  local ft, h, value = lone_fields(s)
  if h ~= holder then
    if ft then return {0} end
    return nil
  end
  if tonumber(ttl_ms) < redis.call('PTTL', state) and not later(clock_us(), ft) then
    tick()
    if to_ms(tonumber(ft)) + LONE_SLACK > now_ms + tonumber(ttl_ms) then return nil end
  end
  redis.call('PEXPIRE', state, ttl_ms)
  return {1, 1, tonumber(ft), 1, value}
end

-- extend_fast renews the holder's lease when it is there and unexpired, every other lease is
-- unexpired, and every counter is one of ours (an extend tells no watcher and serves no line, so
-- a live line or watch changes nothing here): one HSET of the holder's entry (and the keep entry
-- and a PEXPIRE when the hash would not last until the delay would end: hset_kept), written as
-- the general path's encode would (a grant from the line taken: no q mark; its lock delay kept),
-- without decoding the rest of the state. Permits, fence and delay are copied as they are when
-- they read as encode would print them (see whole); else the general path rewrites them.
local function extend_fast(all, PARAMS)
  local me = ':' .. holder
  tick()
  local e, fence, limit, keep
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
      if not plain(v) then return nil end
    elseif string.byte(f) == 58 then -- another holder's lease, which the general path would delete if expired
      local exp = string.match(v, '^%d+ %d+ (%d+)')
      if not exp or tonumber(exp) <= now_ms then return nil end
    else
      return nil
    end
  end
  if not (e and keep and plain3(fence, limit, keep)) then return nil end
  local nt, ft, exp, _, dt, value = fields(e)
  if not (nt and whole(nt) and whole(ft)) or tonumber(exp) <= now_ms then return nil end
  if dt == '' or dt == '0' then
    dt = nil
  elseif not whole(dt) then
    return nil
  end
  local ttl = tonumber(ttl_ms)
  local life = ttl
  if dt then life = ttl + tonumber(dt) end
  hset_kept(tonumber(keep), life, me, entry(nt, ft, int(now_ms + ttl), false, dt, value))
  return {1, tonumber(nt), tonumber(ft), limit and tonumber(limit) or 0, value}
end

-- extend is the general path (see extend_fast).
local function extend(all, PARAMS)
  load(all)
  local me = ':' .. holder
  local l = leases[me]
  if not l then return {0} end
  -- A grant from the line, extended (adopted), is taken: no leave gives it back.
  l.exp, l.q = now_ms + tonumber(ttl_ms), false
  keep(tonumber(ttl_ms) + l.d)
  put(me, l)
  return {1, l.n, l.fence, meta.limit, l.value}
end
