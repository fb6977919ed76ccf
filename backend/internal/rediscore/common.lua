-- Shared prelude of every Leasehold script. One resource key is four Redis keys in one slot,
-- KEYS[1] lease (hash), KEYS[2] queue (zset), KEYS[3] waiting (hash), KEYS[4] left (zset); their
-- records are the table "Record format" in doc.go. The lease hash is all a call needs when nobody
-- waits, read whole by one HGETALL; a counter absent from it is 0.
--   A lease whose expiry has passed is no lease; the next call that writes deletes it, unless it
-- has a lock delay that has not ended (expiry + delay > now): until then the entry stays, delayed,
-- and its permits stay closed to every request (its holder's too), to the key's limit and to the
-- line's head (see delays).
--   Every hash of ours has its keep entry, named 'keep@' .. the layout's version (KEEP_ENTRY): a
-- call that finds another version's, or a hash of ours without one, fails and writes nothing
-- (other_layout). The hash outlives every lease, place, left try and watch it records, and a fence
-- it granted above the clock, by as long again as the longest of them needed when it last set
-- keep (a second at least): its counters must not start again while they are in use. A key left
-- idle (no lease, and no live line, watch or left try) leaves nothing: the call that makes it so
-- deletes the hash (settle; release's fast path likewise). That is safe for fences only because
-- a new grant's fence is max(last + 1, now_us, floors): with the hash gone, last is 0, and the
-- clock, in µs, is above every fence granted before as long as the last fence was below now_us
-- when the hash went. So a hash whose fence is at or above now_us (raised by a floor: a Redlock
-- node's) is replaced by the fence alone, a lone lease's string (see the lone lease), which
-- expires just after the clock passes the fence (this leans on the server clock not going back
-- past the last fence).
--   queue and waiting expire together (the counter line) a minute past the last lease's expiry
-- at the latest try, or twice that, never past twice the longest wait: every live waiter tries
-- again when the leases in its way expire (or at its retry interval), which renews them, so the
-- places of waiters that died go with the keys when nobody uses the key again, whatever their
-- wait. A waiting record's listens says whether a PUBLISH on its channel counts its Store (1) or
-- not (0: a Cluster, where PUBLISH counts only the node's own subscribers).
--   left holds the ids of tries whose caller gave up before the reply came (such a try takes no
-- place in the line: its leave overtook it on another connection), and of leaves a later try of
-- their holder overtook (such a leave does nothing), each until a time in server ms.
-- The key's channels are named after KEYS[1] (see layout.go), so no call sends them: its changed
-- channel, and the channel of each Store that waits (see granted_channel).
-- Every number that goes into a stored string is a whole decimal number below 2^53, as int()
-- writes it: written by int(), or copied as it is from an argument (strconv writes them alike)
-- or from an entry that reads so. Lua's formatting, matching and tables cost the server about as
-- much as a command each, so a call formats only the numbers it changed, writes only the
-- counters it changed, and makes few tables.
-- Time is the server's (TIME); a lease with expiry E is held while now < E.
--
-- A call reads the lease hash once (one HGETALL, which guarded hands to the operation), works on
-- what it read, and writes what it changed back in one HDEL and one HSET (flush), before any grant
-- is published and at its end; the line's keys it reads and writes as it goes. So a call when
-- nobody waits is TIME, HGETALL and one write (and the hash's expiry, on a new key, and, about
-- once per TTL, on a key whose lease outlives its keep).
--   Each operation has two tiers. Its fast path (acquire_fast, extend_fast, release_fast) takes
-- the states of the common case straight from HGETALL's reply, before anything else is set up,
-- and writes what the general path would write; on any other state it returns nil and writes
-- nothing, and the general path (the operation's function: load, then the line's machinery)
-- decides. The fast paths compare texts where they can (see whole and later): a conversion of a
-- number costs the server about as much as a command's argument.
--
-- The same source serves as a script (EVALSHA: this prelude, then the operation's tiers, run by
-- guarded) and as a Redis Functions library (loaded once per server: this prelude once, every
-- operation's tiers, each registered to run by guarded). So nothing here calls Redis when the
-- source is loaded; what one call needs, begin sets up, and every name below that holds a call's
-- state is set by begin. An operation takes the script's arguments as its parameters, named as
-- args.go lists them (the Go side writes them where the source says PARAMS). The first command
-- on each key is a read, or a write that Redis refuses whole on a wrong type, so a key holding
-- someone else's data makes the script fail before it writes to that key or deletes it.
local KEYS
local state, queue, waiting, left
-- clock is the server's time as TIME returned it ({seconds, µs} as text), and now_ms and now_us
-- the same as numbers, which tick sets: every path but the fast release's, which compares texts
-- (see clock_text), needs them.
local clock, now_ms, now_us

-- read is the lease hash as load read it (HGETALL's reply).
local read
-- lone_got is what a lone tier read of the lease key (see lone_read): nil when it read nothing.
local lone_got

-- leases are the unexpired leases as load found them and the call changed them, by entry (':'
-- .. holder): {n = permits, fence, exp = expiry ms, q = untaken grant from the line, d = lock
-- delay ms (0: none), value}, and nt and ft, the text of n and fence when the call has it; delays
-- are the expired leases whose lock delay has not ended (exp + d > now), alike, by entry: no
-- lease any more (no Extend, Release or re-grant takes one), but their permits stay closed until
-- exp + d; used is the permits both hold.
local leases, delays, used
-- meta is the counters by name (see the header), as numbers.
local meta
-- writes are the entries the next flush writes or deletes, nil when none: a lease's entry -> the
-- lease, or false to delete it; a counter's name -> its text, or true to format it. expire says
-- the flush sets the hash's expiry to meta.keep.
local writes, expire
-- tell says the call's end publishes on the changed channel: someone watches, and leases changed.
local tell

local function int(x) return string.format('%d', x) end

-- begin sets up one call: its keys, and the server's time (see tick).
local function begin(keys)
  KEYS = keys
  state, queue, waiting, left = keys[1], keys[2], keys[3], keys[4]
  clock, now_ms, now_us = redis.call('TIME'), nil, nil
  leases, delays, used, meta, read, lone_got = nil, nil, 0, nil, nil, nil
  writes, expire, tell = nil, false, false
end

-- to_ms returns the time in ms of a time in µs, us, rounded down (exactly, below 2^53, with no
-- call of a library function: one costs the server about as much as a command's argument).
local function to_ms(us) return (us - us % 1000) / 1000 end

-- tick sets now_ms and now_us from the clock begin read, once per call.
local function tick()
  if not now_ms then
    local s, us = tonumber(clock[1]), tonumber(clock[2])
    now_ms, now_us = s * 1000 + to_ms(us), s * 1000000 + us
  end
end

-- granted_channel returns the channel of the Store that sent the try id try ("<store id>:<n>"),
-- where it hears of a grant to its waiter on this key: the key's tag (KEYS[1] without "lease"),
-- "granted:" and the store id.
local function granted_channel(try)
  return string.sub(state, 1, -6) .. 'granted:' .. (string.match(try, '^(.*):') or try)
end

-- foreign stops the call: the lease hash holds an entry that is not ours.
local function foreign(field)
  error({err = 'WRONGTYPE leasehold: ' .. state .. ' holds a hash of someone else (entry "' .. field ..
    '" is not ours); it was left untouched'})
end

-- other_layout stops the call: the lease hash is of another layout version than this one's
-- (found: the version its keep entry's name carries, or nil when it has none).
local function other_layout(found)
  error({err = 'LAYOUT leasehold: ' .. state .. ' is of layout ' .. (found or 'none') ..
    ', this Store speaks layout ' .. LAYOUT_VERSION .. '; it was left untouched'})
end

-- counter returns the number a counter's entry holds, or nil when it is not one of ours: ours
-- are whole numbers below 2^53, and one that is not (nan, inf, negative, fractional) is someone
-- else's, and would break the arithmetic (a fence of NaN).
local function counter(v)
  local x = tonumber(v)
  if not x or x % 1 ~= 0 or x < 0 or x >= 9007199254740992 then return nil end
  return x
end

-- whole says the digits t (a %d+ that a pattern captured) are a number as int() writes it:
-- '0', or no leading zero (digits that sort at or above '1'), and below 2^53. Two such texts
-- compare as their numbers do (later).
local function whole(t)
  return (#t < 16 or (#t == 16 and t < '9007199254740992')) and (t >= '1' or t == '0')
end

-- plain says the entry's value v is a counter of ours written as int() writes it (see whole):
-- a fast path takes only those, and leaves any other to the general path, which reads (counter)
-- or reports it.
local function plain(v) return string.find(v, '^%d+$') ~= nil and whole(v) end

-- plain3 says the texts of the counters fence, limit and keep (nil: absent) are plain and not 0
-- (as every lease hash's are): with one pattern match for the three when all are there.
local function plain3(fence, limit, keep)
  if fence and limit and keep then
    return #limit < 16 and #keep < 16 and (#fence < 16 or (#fence == 16 and fence < '9007199254740992')) and
      string.find(fence .. ' ' .. limit .. ' ' .. keep, '^[1-9]%d* [1-9]%d* [1-9]%d*$') ~= nil
  end
  return (not fence or plain(fence)) and (not limit or plain(limit)) and (not keep or plain(keep))
end

-- later says the number a (digits) is above b (digits that whole accepts): decimals with no
-- leading zero compare as their numbers do when one is longer, or, of one length, as texts
-- (digits collate in order in every locale). It is exact when whole accepts a too; otherwise it
-- may say false (a longer a with a leading zero), so a fast path that needs a later a goes the
-- general way then.
local function later(a, b) return (#a == #b and a > b) or (#a > #b and a >= '1') end

-- clock_text returns the server's time as texts, in ms and in µs, as int() would write now_ms
-- and now_us (a text costs the server less than a number made from TIME's reply).
local function clock_text()
  local us = string.sub('00000' .. clock[2], -6)
  return clock[1] .. string.sub(us, 1, 3), clock[1] .. us
end

-- clock_us returns the server's time in µs as text, as int() would write now_us.
local function clock_us() return clock[1] .. string.sub('00000' .. clock[2], -6) end

-- fields returns the texts of a lease's entry v: permits, fence, expiry ms, ' q' for an untaken
-- grant from the line, the lock delay in ms ('' when none), the value ('' when none); nil when v
-- is not a lease's entry.
local function fields(v) return string.match(v, '^(%d+) (%d+) (%d+)( ?q?)%+?(%d*)\n?(.*)$') end

-- load decodes the lease hash, all (as HGETALL returns it): leases, delays, used and meta; an
-- expired lease whose lock delay has ended (or that had none) is marked for deletion.
local function load(all)
  leases, delays, used, read = {}, {}, 0, all
  meta = {fence = 0, limit = 0, seq = 0, watch = 0, line = 0, left = 0}
  local version, odd
  for i = 1, #all, 2 do
    local f, v = all[i], all[i + 1]
    local n, fence, exp, q, d, value
    if string.byte(f) == 58 then -- ':'
      n, fence, exp, q, d, value = fields(v)
      odd = odd or (not n and f)
    elseif meta[f] then
      local x = counter(v)
      if x then meta[f] = x else odd = odd or f end
    elseif f == KEEP_ENTRY then
      version, meta.keep = LAYOUT_VERSION, counter(v)
      odd = odd or (not meta.keep and f)
    elseif f == 'keep' then -- a layout from before versions, unless not ours
      odd = odd or (not counter(v) and f)
    elseif string.sub(f, 1, 5) == 'keep@' then
      version = string.sub(f, 6)
    else
      odd = odd or f
    end
    if n then
      exp = tonumber(exp)
      if d == '' then d = 0 else d = tonumber(d) end
      if exp > now_ms then
        leases[f] = {n = tonumber(n), fence = tonumber(fence), exp = exp, q = q == ' q', d = d, value = value}
        used = used + tonumber(n)
      elseif exp + d > now_ms then
        delays[f] = {n = tonumber(n), fence = tonumber(fence), exp = exp, d = d}
        used = used + tonumber(n)
      else
        writes = writes or {}
        writes[f] = false
      end
    end
  end
  -- Another version's hash is reported as such, whatever it holds; one without a keep entry
  -- (every hash of ours has one), as someone else's when an entry is not ours, else as a layout
  -- from before versions.
  if version ~= LAYOUT_VERSION and (version or (#all > 0 and not odd)) then other_layout(version) end
  if odd then foreign(odd) end
  meta.keep = meta.keep or 0
end

-- setm sets the counter k to v, whose text is text (nil: to be formatted when written).
local function setm(k, v, text)
  meta[k] = v
  writes = writes or {}
  writes[k] = text or true
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
  local until_fence = to_ms(fence) - now_ms + 1
  if until_fence > life then return until_fence end
  return life
end

-- kept is how long a hash that must live life ms more is kept: as long again (a second at
-- least, a year at most), so that a hash kept alive by one lease's extends gets a new expiry at
-- most once per life ms (or year), yet goes at most that long after what it records. The year
-- bounds the expiry of a lease of core.MaxDuration with a lock delay as long (a life of 200
-- years) within what a server that keeps expiries as Go durations (miniredis: 292 years) holds.
local function kept(life)
  if life < 1000 then return life + 1000 end
  if life > 31536000000 then return life + 31536000000 end
  return life + life
end

-- keep makes the lease hash live at least life ms more: when it would not last (see lasts), it
-- is kept (see kept).
local function keep(life)
  if not lasts(meta.keep, life) then
    setm('keep', now_ms + kept(life))
    expire = true
  end
end

-- sooner orders leases (and delayed ones) by when, by expiry alone, their permits are free:
-- their expiry plus their lock delay.
local function sooner(a, b) return a.exp + a.d < b.exp + b.d end

-- entry returns a lease's entry (see fields) from the texts of its permits nt, fence ft and expiry
-- et, whether it is an untaken grant q, its lock delay dt (nil: none) and its value (nil or '':
-- none).
local function entry(nt, ft, et, q, dt, value)
  local s = nt .. ' ' .. ft .. ' ' .. et
  if q then s = s .. ' q' end
  if dt then s = s .. '+' .. dt end
  if value and value ~= '' then s = s .. '\n' .. value end
  return s
end

-- encode returns the lease hash's entry of lease l.
local function encode(l)
  return entry(l.nt or int(l.n), l.ft or int(l.fence), int(l.exp), l.q, l.d > 0 and int(l.d) or nil, l.value)
end

-- A lone lease is the commonest state of a key, one holder of a Mutex's one permit with no lock
-- delay, nobody in line and nobody watching, stored as the lease key's string, not its hash:
-- LONE_TAG .. fence .. ' ' .. #holder .. ' ' .. holder .. value, which expires with the lease
-- (PSETEX: Redis's expiry, by the same clock as TIME, is the lease's). Its limit is 1 and its
-- counters are the fence alone. The fence is the clock at the grant, or a floor or last fence
-- above it that the clock passes before the lease ends (LONE_SLACK ms before at least; a Redlock
-- node's floors are a second ahead): so when the key goes, by expiry or a release after the
-- clock passed the fence, any later grant's clock is above the fence. A release before the clock
-- passed it leaves the fence alone (LONE_TAG .. fence), until the clock passes it. A
-- call that needs more than a lone lease holds (a line, a watch, a lock delay, another limit, a
-- second holder, a fence the lease would outlive) turns it into the hash (unlone) first. The lone
-- tiers (acquire_lone, extend_lone, release_lone) are each one read (GET) and one write.

-- lone_read reads the lease key for a lone tier (GET) and returns what it holds: a string, false
-- when nothing, nil when anything else (a hash, which the tier leaves to the others); and keeps
-- it in lone_got for guarded (true: anything else).
local function lone_read()
  local s = redis.pcall('GET', state)
  if type(s) == 'table' then
    lone_got = true
    return nil
  end
  lone_got = s
  return s
end

-- lone_fields returns a lone lease's fence (text), holder and value (unless no_value); its fence
-- and false when s holds the fence alone; or nil when s is not one of this layout's.
local function lone_fields(s, no_value)
  local ft, hl, at = string.match(s, LONE_PATTERN)
  if not ft then
    ft = string.match(s, LONE_FENCE_PATTERN)
    if ft and plain(ft) then return ft, false end
    return nil
  end
  hl = tonumber(hl)
  if at + hl - 1 > #s or not plain(ft) then return nil end
  if no_value then return ft, string.sub(s, at, at + hl - 1) end
  return ft, string.sub(s, at, at + hl - 1), string.sub(s, at + hl)
end

-- lone_of returns holder's lone lease's fence (text) and value when s holds it, else nil.
local function lone_of(s, holder)
  local ft, h, value = lone_fields(s)
  if h == holder then return ft, value end
  return nil
end

-- unlone returns the lease hash a lone lease s (GET's reply) stands for, as HGETALL would read
-- it, written in its place when writes_back; a string that is no lone lease of this layout
-- stops the call, untouched.
local function unlone(s, writes_back)
  local ft, holder, value = lone_fields(s)
  local left = redis.call('PTTL', state)
  if not ft or left < 0 then
    local found = string.match(s, '^L@(%d+) ')
    if found and found ~= LAYOUT_VERSION then other_layout(found) end
    error({err = 'WRONGTYPE leasehold: ' .. state .. ' holds a string of someone else; it was left untouched'})
  end
  -- PTTL counts from the clock as the server read it for PTTL, which may be later than the call's
  -- TIME (a server stalled meanwhile): the call reads the clock again, so that the lease ends in
  -- the hash no earlier than its key's expiry time.
  clock, now_ms, now_us = redis.call('TIME'), nil, nil
  tick()
  local life, all = kept(left), nil
  if holder == false then
    -- The fence alone, kept until the clock passes it (as its release kept it), a ms at least:
    -- in the key's last ms, which Redis keeps it through, PTTL says 0, which would delete the
    -- hash at once, fence and all, with the clock maybe still below the fence.
    life = math.max(left, to_ms(tonumber(ft)) - now_ms + 1, 1)
    all = {'fence', ft, KEEP_ENTRY, int(now_ms + life)}
  else
    all = {':' .. holder, entry('1', ft, int(now_ms + left), false, nil, value), 'fence', ft, 'limit', '1',
      KEEP_ENTRY, int(now_ms + life)}
  end
  if writes_back then
    redis.call('DEL', state)
    redis.call('HSET', state, unpack(all))
    redis.call('PEXPIRE', state, life)
  end
  return all
end

-- hset_kept writes, for a fast path, the lease's entry e at me, and the counters fence and limit
-- when ft (their texts ft and lt) is not nil, with one HSET; and the keep entry (last, where a
-- grant on a new hash has it) and a PEXPIRE as well when the hash, kept until until_ms, would not
-- live life ms more (see lasts and kept), as keep and flush do on the general path.
local function hset_kept(until_ms, life, me, e, ft, lt)
  local kt
  if not lasts(until_ms, life) then
    life = kept(life)
    kt = int(now_ms + life)
  end
  if ft and kt then
    redis.call('HSET', state, me, e, 'fence', ft, 'limit', lt, KEEP_ENTRY, kt)
  elseif ft then
    redis.call('HSET', state, me, e, 'fence', ft, 'limit', lt)
  elseif kt then
    redis.call('HSET', state, me, e, KEEP_ENTRY, kt)
  else
    redis.call('HSET', state, me, e)
  end
  if kt then redis.call('PEXPIRE', state, life) end
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
        set[#set + 1] = f == 'keep' and KEEP_ENTRY or f
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
