-- Shared prelude of every Leasehold script. One resource key is three Redis keys in one slot:
--   KEYS[1] leases:  sorted set, holder -> expiry in server milliseconds
--   KEYS[2] holders: hash, holder -> "<permits> <fence>"
--   KEYS[3] meta:    hash, fence -> last fence granted, limit -> limit of the latest grant
-- Time is the server's (TIME); a lease with expiry E is held while now < E.
local leases, holders, meta = KEYS[1], KEYS[2], KEYS[3]

for i, k in ipairs({leases, holders, meta}) do
  local t = redis.call('TYPE', k)['ok']
  local want = (i == 1) and 'zset' or 'hash'
  if t ~= 'none' and t ~= want then
    return redis.error_reply('WRONGTYPE leasehold: ' .. k .. ' holds a ' .. t .. ', not a ' .. want .. ' of ours; it was left untouched')
  end
end

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

-- held returns the permits and fence of holder's lease, or nil.
local function held(holder)
  local v = redis.call('HGET', holders, holder)
  if not v then return nil end
  local sp = string.find(v, ' ', 1, true)
  return tonumber(string.sub(v, 1, sp - 1)), tonumber(string.sub(v, sp + 1))
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
