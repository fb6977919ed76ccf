-- Shared prelude of every Leasehold script. One resource key is five Redis keys in one slot:
--   KEYS[1] leases:  sorted set, holder -> expiry in server milliseconds
--   KEYS[2] holders: hash, holder -> "<permits> <fence>"
--   KEYS[3] meta:    hash, fence -> last fence granted, limit -> limit of the latest grant,
--                    seq -> last place given in the line of waiters
--   KEYS[4] queue:   sorted set, the line of waiters: holder -> place
--   KEYS[5] waiting: hash, holder -> "<permits> <deadline in server ms> <limit> <ttl_ms> <min_fence>
--                    <channel>", the request of each waiter in the line and its Store's channel
-- Time is the server's (TIME); a lease with expiry E is held while now < E.
--
-- Each script's body runs as main() under pcall (see guard.lua). The first command on each key
-- is a read, or a write that Redis refuses whole on a wrong type, so a key holding someone
-- else's data makes the script fail before it writes to that key or deletes it.
local leases, holders, meta, queue, waiting = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]

local clock = redis.call('TIME')
local now_ms = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local now_us = tonumber(clock[1]) * 1000000 + tonumber(clock[2])

-- purge removes expired leases.
local function purge()
  local gone = redis.call('ZRANGEBYSCORE', leases, '-inf', now_ms)
  if #gone == 0 then return end
  redis.call('ZREMRANGEBYSCORE', leases, '-inf', now_ms)
  for i = 1, #gone, 1000 do
    redis.call('HDEL', holders, unpack(gone, i, math.min(i + 999, #gone)))
  end
end

-- split returns the two numbers of a "<a> <b>" value.
local function split(v)
  local sp = string.find(v, ' ', 1, true)
  return tonumber(string.sub(v, 1, sp - 1)), tonumber(string.sub(v, sp + 1))
end


-- held returns the permits and fence of holder's lease, or nil.
local function held(holder)
  local v = redis.call('HGET', holders, holder)
  if not v then return nil end
  return split(v)
end


-- stretch makes the lease keys live at least ttl ms more, so that Redis drops them when the last
-- lease expires; fresh says they held no lease before. Removing a lease needs no stretch:
-- Redis deletes a key whose last member is removed, and the expiry only ever overshoots.
local function stretch(ttl, fresh)
  if fresh or redis.call('PTTL', leases) < ttl then
    redis.call('PEXPIRE', leases, ttl)
    redis.call('PEXPIRE', holders, ttl)
  end
end

-- census returns the permits and fence of holder's lease (nil when it holds none), the permits
-- held by all leases, and whether there are none: one call.
local function census(holder)
  local all = redis.call('HGETALL', holders)
  local mine, fence, sum = nil, nil, 0
  for i = 1, #all, 2 do
    local n, f = split(all[i + 1])
    sum = sum + n
    if all[i] == holder then mine, fence = n, f end
  end
  return mine, fence, sum, #all == 0
end

local function int(x) return string.format('%.0f', x) end

-- unqueue takes holder out of the line of waiters.
local function unqueue(holder)
  if redis.call('ZREM', queue, holder) == 1 then
    redis.call('HDEL', waiting, holder)
  end
end

-- enqueue keeps holder's place in the line (or gives it the last one) until wait_ms from now,
-- with the request that a release will grant it and the channel to tell it on.
local function enqueue(holder, n, limit, ttl, min_fence, wait_ms, channel)
  redis.call('HSET', waiting, holder, n .. ' ' .. int(now_ms + wait_ms) .. ' ' .. limit .. ' ' .. ttl .. ' ' .. int(min_fence) .. ' ' .. channel)
  if not redis.call('ZSCORE', queue, holder) then
    redis.call('ZADD', queue, redis.call('HINCRBY', meta, 'seq', 1), holder)
    if redis.call('PTTL', meta) < 0 then
      -- A line on a key never granted (the limits disagree): the counter still goes in time.
      redis.call('PEXPIRE', meta, wait_ms + 604800000)
    end
  end
  if redis.call('PTTL', queue) < wait_ms then
    redis.call('PEXPIRE', queue, wait_ms)
    redis.call('PEXPIRE', waiting, wait_ms)
  end
end

-- grant takes holder out of the line and gives it a lease of n permits for ttl ms, with a fence
-- above last (the key's last fence) and at least min_fence; fresh says no lease was held before.
-- It returns the fence.
local function grant(holder, n, limit, ttl, min_fence, last, fresh)
  unqueue(holder)
  local fence = math.max(last + 1, now_us, min_fence)
  redis.call('HSET', meta, 'fence', int(fence), 'limit', limit)
  -- The counter outlives the leases by a week; after that the server clock carries the order.
  redis.call('PEXPIRE', meta, ttl + 604800000)
  redis.call('ZADD', leases, now_ms + ttl, holder)
  redis.call('HSET', holders, holder, n .. ' ' .. int(fence))
  stretch(ttl, fresh)
  return fence
end

-- peek returns the first 64 waiters of the line and their requests.
local function peek()
  local head = redis.call('ZRANGE', queue, 0, 63)
  if #head == 0 then return head, head end
  return head, redis.call('HMGET', waiting, unpack(head))
end

-- handoff grants what is free to the waiters of head (from peek), in order, passing over those
-- that ask for more than is left and dropping those whose wait has ended. It publishes each
-- grant on the channel of the waiter's Store, as "<length>:<holder><fence> " (one message per
-- channel), and returns {holder, fence, ...}.
local function handoff(head, reqs)
  local out, msgs, order = {}, {}, {}
  if #head == 0 then return out end
  local _, _, in_use = census('')
  local last = tonumber(redis.call('HGET', meta, 'fence') or '0')
  for i = 1, #head do
    local h, n, deadline, limit, ttl, min_fence, channel = head[i], 0, 0
    if reqs[i] then
      local a, b, c, d, e, f = string.match(reqs[i], '^(%d+) (%d+) (%d+) (%d+) (%d+) (.*)$')
      if a then
        n, deadline, limit, ttl, min_fence, channel = tonumber(a), tonumber(b), tonumber(c), tonumber(d), tonumber(e), f
      end
    end
    if deadline <= now_ms or held(h) then
      unqueue(h)
    elseif in_use + n <= limit then
      last = grant(h, n, limit, ttl, min_fence, last, false)
      in_use = in_use + n
      out[#out + 1] = h
      out[#out + 1] = last
      if not msgs[channel] then
        msgs[channel] = {}
        order[#order + 1] = channel
      end
      table.insert(msgs[channel], #h .. ':' .. h .. int(last) .. ' ')
      if in_use >= limit then break end
    end
  end
  for _, channel in ipairs(order) do
    redis.call('PUBLISH', channel, table.concat(msgs[channel]))
  end
  return out
end
