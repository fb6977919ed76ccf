-- ARGV: life_ms
-- Some Store watches the key for life_ms more: until then every script that grants a new lease,
-- releases one or gives one back publishes on the key's changed channel. Returns 1.
local life = tonumber(ARGV[1])
local until_ms = now_ms + life
if tonumber(redis.call('HGET', meta, 'watch') or '0') < until_ms then
  redis.call('HSET', meta, 'watch', int(until_ms))
end
if redis.call('PTTL', meta) < life then
  redis.call('PEXPIRE', meta, life)
end
return 1
