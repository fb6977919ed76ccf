-- Shared prelude of every Leasehold script. One resource key is six Redis keys in one slot:
--   KEYS[1] leases:  sorted set, holder -> expiry in server milliseconds
--   KEYS[2] holders: hash, holder -> "<permits> <fence>", or "<permits> <fence> q" for a lease the
--                    line granted that its waiter has not taken yet (an Acquire by the holder takes it),
--                    then "\n" and the lease's value when it has one (a lease without one is stored
--                    as before values were); and '' (no holder's id: holders are not empty) ->
--                    "0 <server ms>", until when some Store watches the key: until then a script
--                    that grants a new lease, releases one or gives one back publishes on the
--                    key's changed channel. Every script reads it in the read of holders it makes
--                    anyway, and it reads as a lease of 0 permits to older scripts.
--   KEYS[3] meta:    hash, fence -> last fence granted, limit -> limit of the latest grant,
--                    seq -> last place given in the line of waiters
--   KEYS[4] queue:   sorted set, the line of waiters: holder -> place
--   KEYS[5] waiting: hash, holder -> "<permits> <deadline in server ms> <limit> <ttl_ms> <min_fence>
--                    <listens> <channel>", the request of each waiter in the line, its Store's
--                    channel, and whether a PUBLISH there counts that Store when it listens (1) or
--                    not (0: a Cluster, where PUBLISH counts only the node's own subscribers); for
--                    a request with a value, listens is 2 or 3 (0 or 1, plus 2) and "<value length>
--                    <value>" comes before the channel (which holds the user key: any bytes), so
--                    that a place without a value is stored as before values were
--   KEYS[6] left:    sorted set, try id -> server ms until which a try of that id, whose caller
--                    gave up on it before its reply came, takes no place in the line: a leave
--                    that overtook its try on another connection
-- ARGV[#ARGV] is the key's changed channel in every script that can change leases.
-- Every number that goes into a stored string is written by int(), as a whole decimal number.
-- Time is the server's (TIME); a lease with expiry E is held while now < E.
--
-- The same source serves as a script (EVALSHA: this prelude, then the body as main, run by
-- guarded) and as a Redis Functions library (loaded once per server: this prelude once, every
-- body as a function of its own, registered to run by guarded). So nothing here calls Redis
-- when the source is loaded; what one call needs, begin sets up, and every name below that holds
-- a call's state is set by begin. Each body runs as main() under pcall (see guard.lua). The first
-- command on each key is a read, or a write that Redis refuses whole on a wrong type, so a key
-- holding someone else's data makes the script fail before it writes to that key or deletes it.
local KEYS, ARGV
local leases, holders, meta, queue, waiting, left
local now_ms, now_us

-- watch_until is the server ms until which some Store watches the key (0: nobody), once a read
-- of holders has found it (nil before).
local watch_until = nil

-- told says this call published on the changed channel already.
local told = false

-- begin sets up one call: its keys and arguments, and the server's time.
local function begin(keys, args)
  KEYS, ARGV = keys, args
  leases, holders, meta, queue, waiting, left = keys[1], keys[2], keys[3], keys[4], keys[5], keys[6]
  local clock = redis.call('TIME')
  now_ms = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
  now_us = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
  watch_until, told = nil, false
end

-- purge removes expired leases.
local function purge()
  local gone = redis.call('ZRANGEBYSCORE', leases, '-inf', now_ms)
  if #gone == 0 then return end
  redis.call('ZREMRANGEBYSCORE', leases, '-inf', now_ms)
  for i = 1, #gone, 1000 do
    redis.call('HDEL', holders, unpack(gone, i, math.min(i + 999, #gone)))
  end
end

-- split returns the permits and fence of a holders value, whether the line granted that lease
-- and its waiter has not taken it yet, and the lease's value.
local function split(v)
  local a, b, q, value = string.match(v, '^(%d+) (%d+)( ?q?)\n?(.*)$')
  return tonumber(a), tonumber(b), q == ' q', value
end

-- watched records the watch entry of holders, v (nil when there is none).
local function watched(v)
  local _, until_ms = 0, 0
  if v then _, until_ms = split(v) end
  watch_until = until_ms or 0
end

-- held returns the permits and fence of holder's lease, whether it is an untaken grant from
-- the line, and its value; nil when it holds none. It reads the watch entry in the same call.
local function held(holder)
  local v = redis.call('HMGET', holders, holder, '')
  watched(v[2])
  if not v[1] then return nil end
  return split(v[1])
end

-- tail is what follows "<permits> <fence>" in a holders value: mark (' q' for an untaken grant
-- from the line, else ''), then the value after a newline when there is one.
local function tail(mark, value)
  if value == '' then return mark end
  return mark .. '\n' .. value
end

-- changed tells the key's watchers that its leases changed, if anyone watches: a PUBLISH on the
-- changed channel (the last ARGV) while the watch entry's deadline has not passed; else nothing.
-- One message per script call is enough.
local function changed()
  if watch_until == nil then watched(redis.call('HGET', holders, '')) end
  if watch_until > now_ms and not told then
    redis.call('PUBLISH', ARGV[#ARGV], '')
    told = true
  end
end


-- stretch makes the lease keys live at least ttl ms more, and as long as the watch entry, so
-- that Redis drops them when the last lease expires and nobody watches; fresh says they held no
-- lease before. Removing a lease needs no stretch: Redis deletes a key whose last member is
-- removed, and the expiry only ever overshoots. Holders never outlives leases with a lease in
-- it (the watch script stretches both), so no expired lease outlives its purge.
local function stretch(ttl, fresh)
  if fresh or redis.call('PTTL', leases) < ttl then
    local life = math.max(ttl, (watch_until or 0) - now_ms)
    redis.call('PEXPIRE', leases, life)
    redis.call('PEXPIRE', holders, life)
  end
end

-- census returns the permits and fence of holder's lease (nil when it holds none), the permits
-- held by all leases, and whether there are none: one call, which reads the watch entry too.
local function census(holder)
  local all = redis.call('HGETALL', holders)
  local mine, fence, sum, watch = nil, nil, 0, nil
  for i = 1, #all, 2 do
    if all[i] == '' then
      watch = all[i + 1]
    else
      local n, f = split(all[i + 1])
      sum = sum + n
      if all[i] == holder then mine, fence = n, f end
    end
  end
  watched(watch)
  return mine, fence, sum, #all == 0 or (#all == 2 and watch ~= nil)
end

local function int(x) return string.format('%.0f', x) end

-- drop removes holder's lease.
local function drop(holder)
  redis.call('ZREM', leases, holder)
  redis.call('HDEL', holders, holder)
end

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
  redis.call('HSET', waiting, holder, int(n) .. ' ' .. int(now_ms + wait_ms) .. ' ' .. int(limit) .. ' ' .. int(ttl) .. ' ' ..
    int(min_fence) .. ' ' .. rest)
  if not redis.call('ZSCORE', queue, holder) then
    redis.call('ZADD', queue, redis.call('HINCRBY', meta, 'seq', 1), holder)
    if redis.call('PTTL', meta) < wait_ms + 604800000 then
      -- The line's counter lives as long as its places, and the fence counter with it.
      redis.call('PEXPIRE', meta, wait_ms + 604800000)
    end
  end
  if redis.call('PTTL', queue) < wait_ms then
    redis.call('PEXPIRE', queue, wait_ms)
    redis.call('PEXPIRE', waiting, wait_ms)
  end
end

-- grant gives holder a lease of n permits for ttl ms, with a fence above last (the key's last
-- fence) and at least min_fence, and takes it out of the line when the line is not empty (queued:
-- a caller that found the line empty spares the two calls); fresh says no lease was held
-- before, rest is tail(mark, value) (see tail: the mark of an untaken grant from the line, and
-- the lease's value). It returns the fence.
local function grant(holder, n, limit, ttl, min_fence, last, fresh, rest, queued)
  local line_ttl = ttl
  if queued then
    unqueue(holder)
    line_ttl = math.max(ttl, redis.call('PTTL', queue))
  end
  local fence = math.max(last + 1, now_us, min_fence)
  redis.call('HSET', meta, 'fence', int(fence), 'limit', int(limit))
  -- The counter outlives the leases and the line by a week; after that the server clock
  -- carries the order of fences, and the line's places start again.
  redis.call('PEXPIRE', meta, line_ttl + 604800000)
  redis.call('ZADD', leases, now_ms + ttl, holder)
  redis.call('HSET', holders, holder, int(n) .. ' ' .. int(fence) .. rest)
  stretch(ttl, fresh)
  return fence
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

-- serve grants free permits to the line, strictly in order: it stops at the first waiter whose
-- permits are not free, so that nobody behind it, and no newcomer, takes permits before it. On
-- the way it drops places whose wait has ended, whose holder holds a lease already, or whose
-- Store no longer listens (a PUBLISH that reaches nobody, where the count means something: the
-- grant is undone and the next waiter served). Each grant is published on the channel of the
-- waiter's Store as "<length>:<holder><fence> ", and carries the value the waiter asked with. It
-- reads the line 64 places at a time and goes on until the line is empty or its head waits, so a
-- line of any length is served. It returns {holder, fence, ...} of the grants made, and whether
-- the line is empty now.
local function serve()
  local out, gone = {}, {}
  local in_use, last
  while true do
    local head = redis.call('ZRANGE', queue, 0, 63)
    if #head == 0 then return out, true end
    local reqs = redis.call('HMGET', waiting, unpack(head))
    if not in_use then
      local _, _, used = census('')
      in_use, last = used, tonumber(redis.call('HGET', meta, 'fence') or '0')
    end
    for i = 1, #head do
      local h, n, deadline, limit, ttl, min_fence, listens, value, channel = head[i], 0, 0
      if reqs[i] then
        n, deadline, limit, ttl, min_fence, listens, value, channel = request(reqs[i])
      end
      if deadline <= now_ms or gone[channel] or held(h) then
        unqueue(h)
      elseif in_use + n > limit then
        return out, false
      else
        last = grant(h, n, limit, ttl, min_fence, last, false, tail(' q', value), true)
        local heard = redis.call('PUBLISH', channel, #h .. ':' .. h .. int(last) .. ' ')
        if heard == 0 and listens == '1' then
          drop(h) -- its Store is gone (or its subscription down, and its waiters retry)
          gone[channel] = true
        else
          changed()
          in_use = in_use + n
          out[#out + 1] = h
          out[#out + 1] = last
        end
      end
    end
  end
end
