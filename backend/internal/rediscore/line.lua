-- hold_left records in left that id (a try or a leave whose caller gave up on its reply) is kept
-- out for hold ms, and makes left and the lease hash live that long.
local function hold_left(id, hold)
  redis.call('ZREMRANGEBYSCORE', left, '-inf', now_ms)
  redis.call('ZADD', left, now_ms + hold, id)
  if meta.left < now_ms + hold then
    redis.call('PEXPIRE', left, hold)
    setm('left', now_ms + hold)
    keep(hold)
  end
end

-- overtake keeps the leaves named in ids (space-separated) from doing anything for hold ms: a
-- try of their holder has come after them.
local function overtake(ids, hold)
  for id in string.gmatch(ids, '%S+') do hold_left(id, hold) end
end

-- line_live says the line may hold places: its keys have not expired.
local function line_live() return meta.line > now_ms end

-- unqueue takes holder out of the line of waiters.
local function unqueue(holder)
  if redis.call('ZREM', queue, holder) == 1 then
    redis.call('HDEL', waiting, holder)
  end
end

-- enqueue keeps holder's place in the line (or gives it the last one) until wait_ms from now,
-- with the request that a release will grant it, and to: its value, its lock delay (ms) and the
-- channel to tell it on.
local function enqueue(holder, n, limit, ttl, min_fence, wait_ms, listens, to)
  local rest = listens .. ' ' .. to.channel
  if to.value ~= '' or to.delay > 0 then
    local flags = tonumber(listens)
    rest = to.channel
    if to.value ~= '' then
      flags, rest = flags + 2, int(#to.value) .. ' ' .. to.value .. rest
    end
    if to.delay > 0 then
      flags, rest = flags + 4, int(to.delay) .. ' ' .. rest
    end
    rest = int(flags) .. ' ' .. rest
  end
  -- A new waiter takes the last place. A place is kept only while its wait lasts: one whose
  -- wait ended (its waiter gone without a leave, behind a head that serve stopped at) is dead,
  -- and the holder takes the last place.
  local seq = meta.seq + 1
  local new = redis.call('ZADD', queue, 'NX', seq, holder) == 1
  if not new and (tonumber(string.match(redis.call('HGET', waiting, holder) or '', '^%d+ (%d+) ')) or 0) <= now_ms then
    redis.call('ZADD', queue, seq, holder)
    new = true
  end
  if new then setm('seq', seq) end
  redis.call('HSET', waiting, holder, int(n) .. ' ' .. int(now_ms + wait_ms) .. ' ' .. int(limit) .. ' ' .. int(ttl) .. ' ' ..
    int(min_fence) .. ' ' .. rest)
  -- The line's keys must outlive this place until its waiter's next try, and not its wait: span
  -- ms from now, a minute past the last lease's expiry and lock delay (a waiter tries again when
  -- the leases in its way expire and their delays end, or at its retry interval), at most the
  -- wait; so the places of waiters who
  -- died go with the keys when nobody uses the key again, whatever their wait. When the keys
  -- would not last that long, they get twice that, so that the tries after this one, which
  -- mostly need as long, need not set their expiry again. The minute is far above a waiter's
  -- retry interval (10 ms unless set) and its usual stalls; a waiter late by more loses its
  -- place, and takes the last one when it tries again.
  local span = 0
  for _, l in pairs(leases) do span = math.max(span, l.exp + l.d - now_ms) end
  for _, l in pairs(delays) do span = math.max(span, l.exp + l.d - now_ms) end
  span = math.min(wait_ms, span + 60000)
  if meta.line < now_ms + span then
    redis.call('PEXPIRE', queue, 2 * span)
    redis.call('PEXPIRE', waiting, 2 * span)
    setm('line', now_ms + 2 * span)
  end
  -- The place counter and the line's hint outlive the places.
  keep(meta.line - now_ms)
end

-- grant gives holder a lease of n permits for ttl ms with a lock delay of d ms, with a fence
-- above the key's last and at least min_fence, marked q (an untaken grant from the line) and with
-- value; queued says to take holder out of the line; nt and lt are the text of n and limit when
-- the caller has it. The lease hash lives until the delay would end. It returns the fence and its
-- text.
local function grant(holder, n, limit, ttl, d, min_fence, q, value, queued, nt, lt)
  if queued then unqueue(holder) end
  local fence = math.max(meta.fence + 1, now_us, min_fence)
  local ft = int(fence)
  setm('fence', fence, ft)
  setm('limit', limit, lt)
  keep(fenced(ttl + d, fence))
  put(':' .. holder, {n = n, fence = fence, exp = now_ms + ttl, q = q, d = d, value = value, nt = nt, ft = ft})
  return fence, ft
end

-- request decodes a waiting value: permits, deadline, limit, ttl, min_fence, listens ('0' or
-- '1'), value, channel and lock delay (ms); permits and deadline 0 when it cannot. The listens
-- digit carries flags: 2, a value ("<length> <value>") precedes the channel; 4, a lock delay
-- ("<ms> ") precedes that.
local function request(v)
  local a, b, c, d, e, f, rest = string.match(v, '^(%d+) (%d+) (%d+) (%d+) (%d+) ([0-7]) (.*)$')
  if not a then return 0, 0 end
  local value, channel, delay = '', rest, 0
  if f >= '4' then
    local dt, after = string.match(rest, '^(%d+) (.*)$')
    if not dt then return 0, 0 end
    f, delay, rest, channel = tostring(tonumber(f) - 4), tonumber(dt), after, after
  end
  if f >= '2' then
    local vlen, after = string.match(rest, '^(%d+) (.*)$')
    if not vlen or tonumber(vlen) > #after then return 0, 0 end
    f, value, channel = tostring(tonumber(f) - 2), string.sub(after, 1, tonumber(vlen)), string.sub(after, tonumber(vlen) + 1)
  end
  return tonumber(a), tonumber(b), tonumber(c), tonumber(d), tonumber(e), f, value, channel, delay
end

-- held_limit returns the key's limit: that of its unexpired leases and of those in their lock
-- delay (the latest grant's, which they share), or, when it has none, that of the first waiter
-- in its line whose wait has not ended; nil when no lease and no waiter holds the key (or the
-- leases' limit was never written). It reads the line only when no lease is held, and writes
-- nothing.
local function held_limit()
  if next(leases) or next(delays) then
    if meta.limit > 0 then return meta.limit end
    return nil
  end
  if not line_live() then return nil end
  local from = 0
  while true do
    local head = redis.call('ZRANGE', queue, from, from + 15)
    if #head == 0 then return nil end
    local reqs = redis.call('HMGET', waiting, unpack(head))
    for i = 1, #head do
      if reqs[i] then
        local _, deadline, limit = request(reqs[i])
        if deadline > now_ms then return limit end
      end
    end
    from = from + 16
  end
end

-- idle says the lease hash records nothing in use: no lease, no lock delay, no live line, watch
-- or left try. It needs the state load decoded.
local function idle()
  return next(leases) == nil and next(delays) == nil and not line_live() and meta.watch <= now_ms and
    meta.left <= now_ms
end

-- settle ends a call that writes. A key that is idle leaves nothing behind: its lease hash is
-- deleted, unless its fence is at or above the clock (raised there by a floor), and then the
-- fence stays alone, as a lone lease's does, until the clock passes it. A key with no lease, no lock delay and no live line,
-- kept only for a left try or a watch, is kept as long again as they need (see kept), and no
-- longer than the leases and places it recorded before had it kept. Otherwise it writes what the
-- call changed (flush). (A lease's grant and extends keep the hash until its delay would end.)
local function settle()
  if leases and next(leases) == nil and next(delays) == nil and not line_live() and meta.keep > now_ms then
    local live = math.max(meta.left, meta.watch) - now_ms
    if live > 0 then
      local until_ms = now_ms + kept(live)
      if meta.fence >= now_us then until_ms = math.max(until_ms, to_ms(meta.fence) + 1) end
      if meta.keep > until_ms then
        setm('keep', until_ms)
        expire = true
      end
    end
  end
  if leases and idle() then
    if meta.fence < now_us then
      if #read > 0 then
        -- Every entry it may hold: the counters, the leases read, and those the call wrote
        -- (a grant undone); HDEL, not DEL, so that it deletes only entries of ours.
        local gone = {'fence', 'limit', 'seq', 'watch', 'line', 'left', KEEP_ENTRY}
        for i = 1, #read, 2 do
          if string.byte(read[i]) == 58 then gone[#gone + 1] = read[i] end
        end
        for f, w in pairs(writes or {}) do
          if w == false then gone[#gone + 1] = f end
        end
        for i = 1, #gone, 1000 do
          redis.call('HDEL', state, unpack(gone, i, math.min(i + 999, #gone)))
        end
      end
      writes, expire = nil, false
      return
    end
    -- The fence is at or above the clock: it stays alone, as the lone lease's string (see
    -- common.lua), until the clock passes it. load stopped a hash with an entry not ours.
    redis.call('DEL', state)
    redis.call('PSETEX', state, to_ms(meta.fence) - now_ms + 1, LONE_TAG .. int(meta.fence))
    writes, expire = nil, false
    return
  end
  flush()
end

-- serve grants free permits to the line, strictly in order: it stops at the first waiter whose
-- permits are not free (permits a lock delay closes are not), or whose holder's expired lease is
-- in its lock delay, so that nobody behind it, and no newcomer, takes permits before it. On
-- the way it drops places whose wait has ended, whose holder holds a lease already, or whose
-- Store no longer listens (a PUBLISH that reaches nobody, where the count means something: the
-- grant is undone and the next waiter served). Each grant is written (flush) and then published
-- on the channel of the waiter's Store as "<length>:<holder><fence> ", and carries the value the
-- waiter asked with. It reads the first places of the line (first of them: as many as the
-- caller likely needs, since each place read costs the server), then 64 at a time, and goes on
-- until the line is empty or its head waits, so a line of any length is served. It returns
-- {holder, fence, ...} of the grants made (nil when it did not read the line, which is then
-- empty), and whether the line is empty now.
local function serve(first)
  if not line_live() then return nil, true end
  local out, gone, batch = {}, {}, first
  while true do
    local head = redis.call('ZRANGE', queue, 0, batch - 1)
    batch = 64
    if #head == 0 then
      setm('line', 0, '0')
      return out, true
    end
    local reqs = redis.call('HMGET', waiting, unpack(head))
    for i = 1, #head do
      local h, n, deadline, limit, ttl, min_fence, listens, value, channel, d = head[i], 0, 0
      if reqs[i] then
        n, deadline, limit, ttl, min_fence, listens, value, channel, d = request(reqs[i])
      end
      if deadline <= now_ms or gone[channel] or leases[':' .. h] then
        unqueue(h)
      elseif used + n > limit or delays[':' .. h] then
        return out, false
      else
        local fence, ft = grant(h, n, limit, ttl, d, min_fence, true, value, true)
        flush()
        local heard = redis.call('PUBLISH', channel, #h .. ':' .. h .. ft .. ' ')
        if heard == 0 and listens == '1' then
          drop(':' .. h) -- its Store is gone (or its subscription down, and its waiters retry)
          gone[channel] = true
        else
          changed()
          out[#out + 1] = h
          out[#out + 1] = fence
        end
      end
    end
  end
end
