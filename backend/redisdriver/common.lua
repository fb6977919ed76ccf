-- Shared prelude of every Leasehold script. One resource key is five Redis keys in one slot:
--   KEYS[1] leases:  sorted set, holder -> expiry in server milliseconds
--   KEYS[2] holders: hash, holder -> "<permits> <fence>"; fence 0 marks a reservation, made by a
--                    release for a waiter it woke, which is not a lease
--   KEYS[3] meta:    hash, fence -> last fence granted, limit -> limit of the latest grant,
--                    seq -> last place given in the line of waiters, wake -> last wake's id
--   KEYS[4] queue:   sorted set, the line of waiters: holder -> place
--   KEYS[5] waiting: hash, holder -> "<permits> <deadline in server milliseconds>"
-- Time is the server's (TIME); a lease with expiry E is held while now < E.
local leases, holders, meta, queue, waiting = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]

for i, k in ipairs(KEYS) do
  local t = redis.call('TYPE', k)['ok']
  local want = (i == 1 or i == 4) and 'zset' or 'hash'
  if t ~= 'none' and t ~= want then
    return redis.error_reply('WRONGTYPE leasehold: ' .. k .. ' holds a ' .. t .. ', not a ' .. want .. ' of ours; it was left untouched')
  end
end

local clock = redis.call('TIME')
local now_ms = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local now_us = tonumber(clock[1]) * 1000000 + tonumber(clock[2])

-- purge removes expired leases and reservations.
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

-- held returns the permits and fence of holder's lease or reservation (fence 0), or nil.
local function held(holder)
  local v = redis.call('HGET', holders, holder)
  if not v then return nil end
  return split(v)
end

-- used returns the permits held by leases and reservations.
local function used()
  local n = 0
  local vals = redis.call('HVALS', holders)
  for i = 1, #vals do
    n = n + tonumber(string.match(vals[i], '^%d+'))
  end
  return n
end

-- keepalive lets Redis drop the lease keys when the last lease expires.
local function keepalive()
  local last = redis.call('ZRANGE', leases, -1, -1, 'WITHSCORES')
  if #last == 0 then
    redis.call('DEL', leases, holders)
    return
  end
  local ttl = tonumber(last[2]) - now_ms
  redis.call('PEXPIRE', leases, ttl)
  redis.call('PEXPIRE', holders, ttl)
end

local function int(x) return string.format('%.0f', x) end

-- unqueue takes holder out of the line of waiters.
local function unqueue(holder)
  if redis.call('ZREM', queue, holder) == 1 then
    redis.call('HDEL', waiting, holder)
  end
end

-- enqueue keeps holder's place in the line (or gives it the last one) until wait_ms from now.
local function enqueue(holder, n, wait_ms)
  if not redis.call('ZSCORE', queue, holder) then
    redis.call('ZADD', queue, redis.call('HINCRBY', meta, 'seq', 1), holder)
  end
  redis.call('HSET', waiting, holder, n .. ' ' .. int(now_ms + wait_ms))
  if redis.call('PTTL', queue) < wait_ms then
    redis.call('PEXPIRE', queue, wait_ms)
    redis.call('PEXPIRE', waiting, wait_ms)
  end
end

-- wake reserves free permits, for claim_ms, for the waiters at the head of the line, in order,
-- passing over those that ask for more than is left and dropping those whose wait has ended. It
-- publishes "<id> " and the woken holders as netstrings ("<length>:<holder>" each) on channel,
-- where id numbers the wake, and returns {id, holder...}, or {} when it woke nobody. It looks at
-- 64 waiters at most.
local function wake(channel, claim_ms)
  local head = redis.call('ZRANGE', queue, 0, 63)
  if #head == 0 then return {} end
  local free = tonumber(redis.call('HGET', meta, 'limit') or '0') - used()
  local woken, msg = {}, {}
  for i = 1, #head do
    if free <= 0 then break end
    local h = head[i]
    local v = redis.call('HGET', waiting, h)
    local n, deadline = 0, 0
    if v then n, deadline = split(v) end
    if deadline <= now_ms then
      unqueue(h)
    elseif n <= free and not held(h) then
      unqueue(h)
      redis.call('ZADD', leases, now_ms + claim_ms, h)
      redis.call('HSET', holders, h, n .. ' 0')
      free = free - n
      woken[#woken + 1] = h
      msg[#msg + 1] = #h .. ':' .. h
    end
  end
  if #woken == 0 then return woken end
  local id = redis.call('HINCRBY', meta, 'wake', 1)
  redis.call('PUBLISH', channel, id .. ' ' .. table.concat(msg))
  table.insert(woken, 1, id)
  return woken
end
