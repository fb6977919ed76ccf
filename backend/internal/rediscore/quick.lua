-- The quick paths: the uncontended acquire, extend and release of a lock, which guarded tries
-- first, with the lease hash as HGETALL read it (all), before it sets up the general machinery.
-- Each takes only a state it can read without decoding anything else, and does there exactly
-- what the operation's general path (and its fast path) would; on any other state it returns
-- nil, and the call goes on with what it read. Lua's operations cost the server about as much as
-- a command's argument each, so they do as few as they can. They run outside guarded's pcall:
-- a write Redis refuses here (out of memory under EVALSHA, an ACL) fails the call with Redis's
-- own error, which names the script, before anything is written.

-- quick_acquire grants a key whose lease hash is gone (never used, or left idle and deleted):
-- no lease, line, watch, left try or raised fence can be there, so the fence is the clock's
-- (max(0 + 1, now_us), with no fence floor sent), any limit is the key's, and the hash is new:
-- one HSET of the lease and the counters, and its expiry (see keep, fenced and kept).
local function quick_acquire(all)
  local nt, lt = ARGV[6] or '1', ARGV[7] or '1'
  if #all == 0 and #ARGV <= 8 and (nt == lt or tonumber(nt) <= tonumber(lt)) then
    tick()
    local ttl, value = tonumber(ARGV[2]), ARGV[8]
    local ft = string.format('%d', now_us)
    local entry = nt .. ' ' .. ft .. ' ' .. string.format('%d', now_ms + ttl)
    if value and value ~= '' then entry = entry .. '\n' .. value end
    -- kept(fenced(ttl, now_us)), inlined: fenced is max(ttl, 1) at a fence of now_us.
    local life = ttl > 1 and ttl or 1
    life = life + (life > 1000 and life or 1000)
    redis.call('HSET', state, ':' .. ARGV[1], entry, 'fence', ft, 'limit', lt, 'keep', string.format('%d', now_ms + life))
    redis.call('PEXPIRE', state, life)
    return now_us
  end
end

-- quick_release ends the holder's lease when it is the hash's only entry besides the counters
-- fence, limit and keep (each digits with no leading zero, limit and keep below 10^15, the fence
-- below the clock: any other counter, ours or not, goes the general way, which reports one not
-- ours), unexpired, and at the fence asked for, if any: the key is left idle, and its hash
-- deleted (an HDEL of its four entries, as settle's HDEL of every entry would; HDEL, not DEL,
-- which an ACL that lets Leasehold's commands through need not allow). It compares the expiry
-- and the fence with the clock as texts: decimals with no leading zero compare as their numbers
-- do when one is longer, or, of one length, as texts (digits collate in order in every locale).
local function quick_release(all)
  -- In the order a grant on a new hash writes them (HGETALL of a small hash keeps it): any other
  -- order goes the general way.
  local me = ':' .. ARGV[1]
  if #all ~= 8 or all[1] ~= me or all[3] ~= 'fence' or all[5] ~= 'limit' or all[7] ~= 'keep' then return nil end
  local fence, limit, keep = all[4], all[6], all[8]
  if #limit > 15 or #keep > 15 or not string.find(fence .. ' ' .. limit .. ' ' .. keep, '^[1-9]%d* [1-9]%d* [1-9]%d*$') then
    return nil
  end
  local n, ft, exp = string.match(all[2], '^(%d+) (%d+) (%d+)')
  local want = ARGV[2]
  if not n or (want and want ~= '0' and want ~= ft) or string.byte(exp) == 48 then return nil end
  local us = string.sub('00000' .. clock[2], -6)
  local ms = clock[1] .. string.sub(us, 1, 3)
  us = clock[1] .. us
  if #exp < #ms or (#exp == #ms and exp <= ms) or #fence > #us or (#fence == #us and fence >= us) then return nil end
  redis.call('HDEL', state, me, 'fence', 'limit', 'keep')
  if n == '1' then return 1 end
  return tonumber(n)
end

-- quick_extend renews the holder's lease for ttl ms from now when it is the hash's only entry
-- besides the counters fence, limit and keep, laid out and checked as quick_release's, and
-- unexpired: the entry written back as the general path writes it (a grant from the line taken:
-- no q mark), and the hash's keep and expiry when it would not last (see keep).
local function quick_extend(all)
  local me = ':' .. ARGV[1]
  if #all ~= 8 or all[1] ~= me or all[3] ~= 'fence' or all[5] ~= 'limit' or all[7] ~= 'keep' then return nil end
  local fence, limit, keep = all[4], all[6], all[8]
  if #limit > 15 or #keep > 15 or #fence > 16 or (#fence == 16 and fence >= '9007199254740992') or
    not string.find(fence .. ' ' .. limit .. ' ' .. keep, '^[1-9]%d* [1-9]%d* [1-9]%d*$') then
    return nil
  end
  tick()
  -- Permits and fence are written back as they are when they are whole decimals the general
  -- path's encode would print the same (no leading zero, below 2^53).
  local nt, ft, exp, _, value = string.match(all[2], '^(%d+) (%d+) (%d+)( ?q?)\n?(.*)$')
  if not nt or #nt > 15 or #ft > 16 or string.byte(nt) == 48 or string.byte(ft) == 48 or tonumber(exp) <= now_ms then
    return nil
  end
  local f = tonumber(ft)
  if f >= 9007199254740992 then return nil end
  local ttl = tonumber(ARGV[2])
  local e = nt .. ' ' .. ft .. ' ' .. string.format('%d', now_ms + ttl)
  if value ~= '' then e = e .. '\n' .. value end
  if tonumber(keep) > now_ms + ttl then -- lasts(keep, ttl), inlined
    redis.call('HSET', state, me, e)
  else
    local life = ttl + (ttl > 1000 and ttl or 1000) -- kept(ttl)
    redis.call('HSET', state, me, e, 'keep', string.format('%d', now_ms + life))
    redis.call('PEXPIRE', state, life)
  end
  return {1, tonumber(nt), f, tonumber(limit), value}
end
