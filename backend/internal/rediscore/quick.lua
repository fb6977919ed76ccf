-- The quick paths: the uncontended acquire, extend and release of a lock, which guarded tries
-- first, with the lease hash as HGETALL read it (all), before it sets up the general machinery.
-- Each takes only a state it can read without decoding anything else, and does there exactly
-- what the operation's general path (and its fast path) would; on any other state it returns
-- nil, and the call goes on with what it read. Lua's operations cost the server about as much as
-- a command's argument each, so they do as few as they can. They run outside guarded's pcall:
-- a write Redis refuses here (out of memory under EVALSHA, an ACL) fails the call with Redis's
-- own error, which names the script, before anything is written.

-- quick_acquire grants a key that has no lease, place, watch or left try, to a try that overtakes
-- no leave (see acquire.lua): its lease hash is gone (never used, or left idle and deleted), or
-- holds the counters fence, limit and keep alone, as a
-- release leaves them under a fence above the clock (a Redlock node's). The fence is max(last +
-- 1, now_us, the floors sent), any limit is the key's, and the grant is one HSET of the lease and
-- the counters, and the hash's expiry when it would not last (see keep, fenced and kept): what
-- the general path would write.
local function quick_acquire(all)
  if ARGV[12] then return nil end -- leaves to overtake: the general path records them
  local nt, lt = ARGV[6] or '1', ARGV[7] or '1'
  local last, keep = 0, 0
  if #all ~= 0 then
    if #all ~= 6 or all[1] ~= 'fence' or all[3] ~= 'limit' or all[5] ~= KEEP_ENTRY or #all[2] > 16 or #all[4] > 15 or
      #all[6] > 15 or not string.find(all[2] .. ' ' .. all[4] .. ' ' .. all[6], '^[1-9]%d* [1-9]%d* [1-9]%d*$') then
      return nil
    end
    last, keep = tonumber(all[2]), tonumber(all[6])
    if last >= 9007199254740992 then return nil end
  end
  if nt ~= lt and tonumber(nt) > tonumber(lt) then return nil end
  tick()
  local ttl, value = tonumber(ARGV[2]), ARGV[8]
  local fence, delay = now_us, 0
  if last >= fence then fence = last + 1 end
  if ARGV[9] then
    fence = math.max(fence, tonumber(ARGV[9]), tonumber(ARGV[10] or 0))
    delay = tonumber(ARGV[11] or 0) -- a lock delay (sent when there is one, after every other argument)
  end
  local ft = string.format('%d', fence)
  local entry = nt .. ' ' .. ft .. ' ' .. string.format('%d', now_ms + ttl)
  -- The lease hash lives until the lock delay would end (fenced(ttl + delay, fence)).
  local life = ttl
  if delay > 0 then entry, life = entry .. '+' .. string.format('%d', delay), ttl + delay end
  if value and value ~= '' then entry = entry .. '\n' .. value end
  -- fenced(life, fence), lasts and kept, inlined.
  if fence >= now_us then life = math.max(life, math.floor(fence / 1000) - now_ms + 1) end
  if keep > now_ms + life then
    redis.call('HSET', state, ':' .. ARGV[1], entry, 'fence', ft, 'limit', lt)
  else
    life = life + math.min(life > 1000 and life or 1000, 31536000000)
    redis.call('HSET', state, ':' .. ARGV[1], entry, 'fence', ft, 'limit', lt, KEEP_ENTRY, string.format('%d', now_ms + life))
    redis.call('PEXPIRE', state, life)
  end
  return fence
end

-- lone returns the entry of the lease at me and the counters fence, limit and keep (texts) when
-- they are the lease hash's only entries, all (as HGETALL read it), in any order, and the counters
-- are digits with no leading zero, limit and keep below 10^15 and the fence below 2^53; otherwise
-- nil (any other entry, ours or not, goes the general way, which reports one not ours).
local function lone(all, me)
  if #all ~= 8 then return nil end
  local entry, fence, limit, keep
  for i = 1, 7, 2 do
    local f = all[i]
    if f == me then
      entry = all[i + 1]
    elseif f == 'fence' then
      fence = all[i + 1]
    elseif f == 'limit' then
      limit = all[i + 1]
    elseif f == KEEP_ENTRY then
      keep = all[i + 1]
    else
      return nil
    end
  end
  if not (entry and fence and limit and keep) or #limit > 15 or #keep > 15 or #fence > 16 or
    (#fence == 16 and fence >= '9007199254740992') or
    not string.find(fence .. ' ' .. limit .. ' ' .. keep, '^[1-9]%d* [1-9]%d* [1-9]%d*$') then
    return nil
  end
  return entry, fence, limit, keep
end

-- quick_release ends the holder's lease when it is the hash's only entry besides the counters
-- fence, limit and keep (each digits with no leading zero, limit and keep below 10^15, the fence
-- below 2^53: any other counter, ours or not, goes the general way, which reports one not ours),
-- unexpired, and at the fence asked for, if any: the key is left idle, and its hash deleted (an
-- HDEL of its four entries, as settle's HDEL of every entry would; HDEL, not DEL, which an ACL
-- that lets Leasehold's commands through need not allow), or, under a fence at or above the
-- clock, kept with its counters until the clock passes the fence, as settle keeps it. It compares the expiry
-- and the fence with the clock as texts: decimals with no leading zero compare as their numbers
-- do when one is longer, or, of one length, as texts (digits collate in order in every locale).
local function quick_release(all)
  local me = ':' .. ARGV[1]
  local entry, fence, limit, keep = lone(all, me)
  if not entry then return nil end
  local n, ft, exp = string.match(entry, '^(%d+) (%d+) (%d+)')
  local want = ARGV[2]
  if not n or (want and want ~= '0' and want ~= ft) or string.byte(exp) == 48 then return nil end
  local us = string.sub('00000' .. clock[2], -6)
  local ms = clock[1] .. string.sub(us, 1, 3)
  us = clock[1] .. us
  if #exp < #ms or (#exp == #ms and exp <= ms) then return nil end
  if #fence > #us or (#fence == #us and fence >= us) then
    -- A fence above the clock (a Redlock node's): the hash keeps its counters until the clock
    -- passes the fence, as settle keeps it.
    local f = tonumber(fence)
    tick()
    local until_ms = math.floor(f / 1000) + 1
    if tonumber(keep) == until_ms then
      redis.call('HDEL', state, me)
    else
      redis.call('HDEL', state, me)
      redis.call('HSET', state, KEEP_ENTRY, string.format('%d', until_ms))
      redis.call('PEXPIRE', state, until_ms - now_ms)
    end
  else
    redis.call('HDEL', state, me, 'fence', 'limit', KEEP_ENTRY)
  end
  if n == '1' then return 1 end
  return tonumber(n)
end

-- quick_extend renews the holder's lease for ttl ms from now when it is the hash's only entry
-- besides the counters fence, limit and keep, laid out and checked as quick_release's, and
-- unexpired: the entry written back as the general path writes it (a grant from the line taken:
-- no q mark; its lock delay kept), and the hash's keep and expiry when it would not last until
-- the delay would end (see keep).
local function quick_extend(all)
  local me = ':' .. ARGV[1]
  local entry, fence, limit, keep = lone(all, me)
  if not entry then return nil end
  tick()
  -- Permits and fence are written back as they are when they are whole decimals the general
  -- path's encode would print the same (no leading zero, below 2^53).
  local nt, ft, exp, _, d, value = string.match(entry, '^(%d+) (%d+) (%d+)( ?q?)%+?(%d*)\n?(.*)$')
  if not nt or #nt > 15 or #ft > 16 or string.byte(nt) == 48 or string.byte(ft) == 48 or tonumber(exp) <= now_ms then
    return nil
  end
  local f = tonumber(ft)
  if f >= 9007199254740992 then return nil end
  local ttl = tonumber(ARGV[2])
  local e = nt .. ' ' .. ft .. ' ' .. string.format('%d', now_ms + ttl)
  if d ~= '' then
    -- The lock delay, as encode would print it (else the general way), and the hash outlives it.
    if #d > 15 or string.byte(d) == 48 then return nil end
    e, ttl = e .. '+' .. d, ttl + tonumber(d)
  end
  if value ~= '' then e = e .. '\n' .. value end
  if tonumber(keep) > now_ms + ttl then -- lasts(keep, ttl), inlined
    redis.call('HSET', state, me, e)
  else
    local life = ttl + math.min(ttl > 1000 and ttl or 1000, 31536000000) -- kept(ttl)
    redis.call('HSET', state, me, e, KEEP_ENTRY, string.format('%d', now_ms + life))
    redis.call('PEXPIRE', state, life)
  end
  return {1, tonumber(nt), f, tonumber(limit), value}
end
