-- Shared prelude of every Leasehold script. One resource key is four Redis keys in one slot:
--   KEYS[1] lease:   hash, all a call needs when nobody waits, read whole by one HGETALL. A lease is
--                    the entry ':' .. holder -> "<permits> <fence> <expiry in server ms>", then " q"
--                    for a lease the line granted that its waiter has not taken yet (an Acquire by
--                    the holder takes it), then "\n" and the lease's value when it has one. A lease
--                    whose expiry has passed is no lease; the next call that writes deletes it.
--                    The key's counters are entries of their own, none starting with ':' (an
--                    absent one is 0): fence (the last fence granted), limit (of the latest
--                    grant), seq (the last place given in the line), watch (until when, in server
--                    ms, some Store watches the key: until then a call that grants a new lease,
--                    releases one or gives one back publishes on the key's changed channel), line
--                    (until when queue and waiting may hold places: they expire then, and a call
--                    reads the line only before), left (until when left may hold try ids: read
--                    only before) and keep (when the hash itself expires). The hash outlives
--                    every lease, place, left try and watch it records, and a fence it granted
--                    above the clock, by as long again as the longest of them needed when it
--                    last set keep (a second at least): its counters must not start again while
--                    they are in use. A key left idle (no lease, and no live line, watch or left
--                    try) leaves nothing: the call that makes it so deletes the hash (settle;
--                    release's fast path likewise). That is safe for fences only because a new
--                    grant's fence is max(last + 1, now_us, floors): with the hash gone, last is
--                    0, and the clock, in µs, is above every fence granted before as long as the
--                    last fence was below now_us when the hash went. So a hash whose fence is at
--                    or above now_us (raised by a floor: a Redlock node's) is not deleted but
--                    expires just after the clock passes the fence. (This leans on the server
--                    clock not going back past the last fence; a week's margin, as before, only
--                    made a step back less likely to matter, at a week of memory per key.)
--   KEYS[2] queue:   sorted set, the line of waiters: holder -> place. It and waiting expire
--                    together (the counter line) a minute past the last lease's expiry at the
--                    latest try, or twice that, never past twice the longest wait: every live
--                    waiter tries again when the leases in its way expire (or at its retry
--                    interval), which renews them, so the places of waiters that died go with
--                    the keys when nobody uses the key again, whatever their wait.
--   KEYS[3] waiting: hash, holder -> "<permits> <deadline in server ms> <limit> <ttl_ms> <min_fence>
--                    <listens> <channel>", the request of each waiter in the line, its Store's
--                    channel, and whether a PUBLISH there counts that Store when it listens (1) or
--                    not (0: a Cluster, where PUBLISH counts only the node's own subscribers); for
--                    a request with a value, listens is 2 or 3 (0 or 1, plus 2) and "<value length>
--                    <value>" comes before the channel (which holds the user key: any bytes)
--   KEYS[4] left:    sorted set, try id -> server ms until which a try of that id, whose caller
--                    gave up on it before its reply came, takes no place in the line: a leave
--                    that overtook its try on another connection
-- ARGV[#ARGV] is the key's changed channel in every script that can change leases.
-- Every number that goes into a stored string is a whole decimal number below 2^53, as int()
-- writes it: written by int(), or copied as it is from an argument (strconv writes them alike)
-- or from an entry that reads so. Lua's formatting, matching and tables cost the server about as
-- much as a command each, so a call formats only the numbers it changed, writes only the
-- counters it changed, and makes few tables.
-- Time is the server's (TIME); a lease with expiry E is held while now < E.
--
-- A call reads the lease hash once (one HGETALL, which guard hands to the body), works on what
-- it read, and writes what it changed back in one HDEL and one HSET (flush), before any grant is
-- published and at its end; the line's keys it reads and writes as it goes. So a call when
-- nobody waits is TIME, HGETALL and one write (and the hash's expiry, on a new key, and, about
-- once per TTL, on a key whose lease outlives its keep). In the common case acquire, extend and
-- release write straight from the reply (their fast paths), and decode the state with load only
-- when it rules that out.
--
-- The same source serves as a script (EVALSHA: this prelude, then the body as main, run by
-- guarded) and as a Redis Functions library (loaded once per server: this prelude once, every
-- body as a function of its own, registered to run by guarded). So nothing here calls Redis
-- when the source is loaded; what one call needs, begin sets up, and every name below that holds
-- a call's state is set by begin. The first command on each key is a read, or a write that Redis
-- refuses whole on a wrong type, so a key holding someone else's data makes the script fail
-- before it writes to that key or deletes it.
local KEYS, ARGV
local state, queue, waiting, left
local now_ms, now_us

-- read is the lease hash as load read it (HGETALL's reply).
local read

-- leases are the unexpired leases as load found them and the call changed them, by entry (':'
-- .. holder): {n = permits, fence, exp = expiry ms, q = untaken grant from the line, value}, and
-- nt and ft, the text of n and fence when the call has it; used is the permits they hold.
local leases, used
-- meta is the counters by name (see the header), as numbers.
local meta
-- writes are the entries the next flush writes or deletes, nil when none: a lease's entry -> the
-- lease, or false to delete it; a counter's name -> its text, or true to format it. expire says
-- the flush sets the hash's expiry to meta.keep.
local writes, expire
-- tell says the call's end publishes on the changed channel: someone watches, and leases changed.
local tell

local function int(x) return string.format('%d', x) end

-- begin sets up one call: its keys and arguments, and the server's time.
local function begin(keys, args)
  KEYS, ARGV = keys, args
  state, queue, waiting, left = keys[1], keys[2], keys[3], keys[4]
  local clock = redis.call('TIME')
  local s, us = tonumber(clock[1]), tonumber(clock[2])
  now_ms, now_us = s * 1000 + math.floor(us / 1000), s * 1000000 + us
  leases, used, meta, read = nil, 0, nil, nil
  writes, expire, tell = nil, false, false
end

-- foreign stops the call: the lease hash holds an entry that is not ours.
local function foreign(field)
  error({err = 'WRONGTYPE leasehold: ' .. state .. ' holds a hash of someone else (entry "' .. field ..
    '" is not ours); it was left untouched'})
end

-- counter returns the number a counter's entry holds, or nil when it is not one of ours: ours
-- are whole numbers below 2^53, and one that is not (nan, inf, negative, fractional) is someone
-- else's, and would break the arithmetic (a fence of NaN).
local function counter(v)
  local x = tonumber(v)
  if not x or x % 1 ~= 0 or x < 0 or x >= 9007199254740992 then return nil end
  return x
end

-- load decodes the lease hash, all (as HGETALL returns it): leases, used and meta; an expired
-- lease is marked for deletion.
local function load(all)
  leases, used, read = {}, 0, all
  meta = {fence = 0, limit = 0, seq = 0, watch = 0, line = 0, left = 0, keep = 0}
  for i = 1, #all, 2 do
    local f, v = all[i], all[i + 1]
    if string.byte(f) == 58 then -- ':'
      local n, fence, exp, q, value = string.match(v, '^(%d+) (%d+) (%d+)( ?q?)\n?(.*)$')
      if not n then foreign(f) end
      exp = tonumber(exp)
      if exp > now_ms then
        leases[f] = {n = tonumber(n), fence = tonumber(fence), exp = exp, q = q == ' q', value = value}
        used = used + tonumber(n)
      else
        writes = writes or {}
        writes[f] = false
      end
    else
      local x = meta[f] and counter(v)
      if not x then foreign(f) end
      meta[f] = x
    end
  end
end

-- setm sets the counter k to v, whose text is text (nil: to be formatted when written).
local function setm(k, v, text)
  meta[k] = v
  writes = writes or {}
  writes[k] = text or true
end

-- scan reads the lease hash as HGETALL returned it, all, for a fast path of the lease at entry
-- me: it returns me's entry (nil when none) and whether the rest allows the fast path (every
-- other lease well formed and unexpired, since the general path deletes an expired one and
-- reports one not ours; every other entry a counter of ours; and, when quiet, no live line or
-- watch), stopping at the first entry that rules it out; and, when it allows it, the counters
-- limit and keep (0 when absent), whether me's is the only lease, whether a left try lives, and
-- whether the fence is at or above the clock (see settle).
local function scan(all, me, quiet)
  local entry, limit, until_ms, alone, tries, raised = nil, 0, 0, true, false, false
  for i = 1, #all, 2 do
    local f, v = all[i], all[i + 1]
    if f == me then
      entry = v
    elseif string.byte(f) == 58 then -- another holder's lease
      local exp = string.match(v, '^%d+ %d+ (%d+)')
      if not exp or tonumber(exp) <= now_ms then return entry, false end
      alone = false
    else
      local x = counter(v)
      if not x or not (f == 'fence' or f == 'limit' or f == 'seq' or f == 'keep' or f == 'left' or
        f == 'line' or f == 'watch') or (quiet and (f == 'line' or f == 'watch') and x > now_ms) then
        return entry, false
      end
      if f == 'limit' then
        limit = x
      elseif f == 'keep' then
        until_ms = x
      elseif f == 'left' then
        tries = x > now_ms
      elseif f == 'fence' then
        raised = x >= now_us
      end
    end
  end
  return entry, true, limit, until_ms, alone, tries, raised
end

-- lasts says a lease hash that expires at until_ms (its keep) needs no new expiry to live life
-- ms more. It asks for a millisecond more than life: an expiry set by PEXPIRE counts from the
-- server's time at the call's start, up to a millisecond before the TIME that now_ms reads, so a
-- key given the same expiry by two calls may expire a millisecond apart.
local function lasts(until_ms, life) return until_ms > now_ms + life end

-- fenced returns life, or, when fence is above the clock, the ms until the clock passes it, if
-- longer: the lease hash must outlive a fence above the clock (see the header).
local function fenced(life, fence)
  if fence < now_us then return life end
  return math.max(life, math.floor(fence / 1000) - now_ms + 1)
end

-- kept is how long a hash that must live life ms more is kept: as long again (a second at
-- least), so that a hash kept alive by one lease's extends gets a new expiry at most once per
-- life ms, yet goes at most that long after what it records.
local function kept(life) return life + math.max(life, 1000) end

-- keep makes the lease hash live at least life ms more: when it would not last (see lasts), it
-- is kept (see kept).
local function keep(life)
  if not lasts(meta.keep, life) then
    setm('keep', now_ms + kept(life))
    expire = true
  end
end

-- sooner orders leases by expiry.
local function sooner(a, b) return a.exp < b.exp end

-- encode returns the lease hash's entry of lease l.
local function encode(l)
  local s = (l.nt or int(l.n)) .. ' ' .. (l.ft or int(l.fence)) .. ' ' .. int(l.exp)
  if l.q then s = s .. ' q' end
  if l.value ~= '' then s = s .. '\n' .. l.value end
  return s
end

-- flush writes what the call changed in the lease hash: the deletions first (they must go
-- through when the server is out of memory), then one HSET, then the expiry.
local function flush()
  if writes then
    local set, del = {}, nil
    for f, w in pairs(writes) do
      if w == false then
        del = del or {}
        del[#del + 1] = f
      else
        set[#set + 1] = f
        if w == true then
          set[#set + 1] = int(meta[f])
        elseif type(w) == 'string' then
          set[#set + 1] = w
        else
          set[#set + 1] = encode(w)
        end
      end
    end
    writes = nil
    if del then
      for i = 1, #del, 1000 do
        redis.call('HDEL', state, unpack(del, i, math.min(i + 999, #del)))
      end
    end
    for i = 1, #set, 1000 do
      redis.call('HSET', state, unpack(set, i, math.min(i + 999, #set)))
    end
  end
  if expire then
    redis.call('PEXPIRE', state, meta.keep - now_ms)
    expire = false
  end
end

-- put records lease l at entry f, to be written by the next flush; it replaces any lease there.
local function put(f, l)
  local had = leases[f]
  if had then used = used - had.n end
  writes = writes or {}
  leases[f], writes[f] = l, l
  used = used + l.n
end

-- drop removes the lease at entry f.
local function drop(f)
  local had = leases[f]
  if had then used = used - had.n end
  writes = writes or {}
  leases[f], writes[f] = nil, false
end

-- changed tells the key's watchers, at the call's end, that its leases changed, if anyone
-- watches. One message per call is enough.
local function changed()
  if meta.watch > now_ms then tell = true end
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
-- with the request that a release will grant it, and to: its value and the channel to tell it on.
local function enqueue(holder, n, limit, ttl, min_fence, wait_ms, listens, to)
  local rest = listens .. ' ' .. to.channel
  if to.value ~= '' then
    rest = int(tonumber(listens) + 2) .. ' ' .. int(#to.value) .. ' ' .. to.value .. to.channel
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
  -- ms from now, a minute past the last lease's expiry (a waiter tries again when the leases in
  -- its way expire, or at its retry interval), at most the wait; so the places of waiters who
  -- died go with the keys when nobody uses the key again, whatever their wait. When the keys
  -- would not last that long, they get twice that, so that the tries after this one, which
  -- mostly need as long, need not set their expiry again. The minute is far above a waiter's
  -- retry interval (10 ms unless set) and its usual stalls; a waiter late by more loses its
  -- place, and takes the last one when it tries again.
  local span = 0
  for _, l in pairs(leases) do span = math.max(span, l.exp - now_ms) end
  span = math.min(wait_ms, span + 60000)
  if meta.line < now_ms + span then
    redis.call('PEXPIRE', queue, 2 * span)
    redis.call('PEXPIRE', waiting, 2 * span)
    setm('line', now_ms + 2 * span)
  end
  -- The place counter and the line's hint outlive the places.
  keep(meta.line - now_ms)
end

-- grant gives holder a lease of n permits for ttl ms, with a fence above the key's last and at
-- least min_fence, marked q (an untaken grant from the line) and with value; queued says to take
-- holder out of the line; nt and lt are the text of n and limit when the caller has it. It
-- returns the fence and its text.
local function grant(holder, n, limit, ttl, min_fence, q, value, queued, nt, lt)
  if queued then unqueue(holder) end
  local fence = math.max(meta.fence + 1, now_us, min_fence)
  local ft = int(fence)
  setm('fence', fence, ft)
  setm('limit', limit, lt)
  keep(fenced(ttl, fence))
  put(':' .. holder, {n = n, fence = fence, exp = now_ms + ttl, q = q, value = value, nt = nt, ft = ft})
  return fence, ft
end

-- request decodes a waiting value: permits, deadline, limit, ttl, min_fence, listens ('0' or
-- '1'), value and channel; permits and deadline 0 when it cannot.
local function request(v)
  local a, b, c, d, e, f, rest = string.match(v, '^(%d+) (%d+) (%d+) (%d+) (%d+) ([0-3]) (.*)$')
  if not a then return 0, 0 end
  local value, channel = '', rest
  if f >= '2' then
    local vlen, after = string.match(rest, '^(%d+) (.*)$')
    if not vlen or tonumber(vlen) > #after then return 0, 0 end
    f, value, channel = tostring(tonumber(f) - 2), string.sub(after, 1, tonumber(vlen)), string.sub(after, tonumber(vlen) + 1)
  end
  return tonumber(a), tonumber(b), tonumber(c), tonumber(d), tonumber(e), f, value, channel
end

-- held_limit returns the key's limit: that of its unexpired leases (the latest grant's, which
-- they share), or, when it has none, that of the first waiter in its line whose wait has not
-- ended; nil when no lease and no waiter holds the key (or the leases' limit was never written).
-- It reads the line only when no lease is held, and writes nothing.
local function held_limit()
  if next(leases) then
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

-- idle says the lease hash records nothing in use: no lease, no live line, watch or left try.
-- It needs the state load decoded.
local function idle()
  return next(leases) == nil and not line_live() and meta.watch <= now_ms and meta.left <= now_ms
end

-- settle ends a call that writes. A key that is idle leaves nothing behind: its lease hash is
-- deleted, unless its fence is at or above the clock (raised there by a floor), and then it
-- expires once the clock passes the fence. A key with no lease and no live line, kept only for a
-- left try or a watch, is kept as long again as they need (see kept), and no longer than the
-- leases and places it recorded before had it kept. Otherwise it writes what the call changed
-- (flush).
local function settle()
  if leases and next(leases) == nil and not line_live() and meta.keep > now_ms then
    local live = math.max(meta.left, meta.watch) - now_ms
    if live > 0 then
      local until_ms = now_ms + kept(live)
      if meta.fence >= now_us then until_ms = math.max(until_ms, math.floor(meta.fence / 1000) + 1) end
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
        local gone = {'fence', 'limit', 'seq', 'watch', 'line', 'left', 'keep'}
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
    local until_ms = math.floor(meta.fence / 1000) + 1
    if meta.keep ~= until_ms then
      setm('keep', until_ms)
      expire = true
    end
  end
  flush()
end

-- serve grants free permits to the line, strictly in order: it stops at the first waiter whose
-- permits are not free, so that nobody behind it, and no newcomer, takes permits before it. On
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
      local h, n, deadline, limit, ttl, min_fence, listens, value, channel = head[i], 0, 0
      if reqs[i] then
        n, deadline, limit, ttl, min_fence, listens, value, channel = request(reqs[i])
      end
      if deadline <= now_ms or gone[channel] or leases[':' .. h] then
        unqueue(h)
      elseif used + n > limit then
        return out, false
      else
        local fence, ft = grant(h, n, limit, ttl, min_fence, true, value, true)
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
