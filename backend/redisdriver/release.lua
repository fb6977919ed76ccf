-- ARGV: holder, channel
-- Returns the permits freed (0 when the holder held none) and publishes them on the channel.
local holder = ARGV[1]
purge()
local n = held(holder)
if not n then
  keepalive()
  return 0
end
redis.call('ZREM', leases, holder)
redis.call('HDEL', holders, holder)
keepalive()
redis.call('PUBLISH', ARGV[2], n)
return n
