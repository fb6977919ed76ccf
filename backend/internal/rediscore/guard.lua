-- call runs main with the lease hash, all (or, when nil, as it reads it now: a HGETALL, which
-- fails on a wrong type), and the script's arguments, args; and, when writes_back (every call but
-- a read-only one), writes what main changed (or deletes the hash of a key left idle: settle) and
-- tells the key's watchers.
local function call(main, writes_back, all, args)
  local r = main(all or redis.call('HGETALL', state), unpack(args))
  if writes_back then
    settle()
    if tell then redis.call('PUBLISH', string.sub(state, 1, -6) .. 'changed', '') end
  end
  return r
end

-- guarded runs one call of an operation, its fast path fast (nil: none) and its general path
-- main, with keys and args (see call), and turns a wrong-type failure into an error naming the
-- key at fault. The fast path runs first, on the lease hash read by a HGETALL that returns a
-- wrong type's error rather than raise it (then main reads the hash again, and fails as it
-- would have), outside the pcall: a write Redis refuses there (out of memory under EVALSHA, an
-- ACL) fails the call with Redis's own error, before anything is written. When it returns nil,
-- it wrote nothing, and main decides.
local function guarded(main, fast, keys, args, writes_back)
  begin(keys)
  local all
  if fast then
    all = redis.pcall('HGETALL', state)
    if all.err then
      all = nil
    else
      local r = fast(all, unpack(args))
      if r then return r end
    end
  end
  tick()
  local ok, res = pcall(call, main, writes_back, all, args)
  if ok then return res end
  local msg = type(res) == 'table' and res.err or tostring(res)
  if string.find(msg, 'WRONGTYPE', 1, true) then
    for i, k in ipairs(KEYS) do
      local t = redis.call('TYPE', k)['ok']
      local want = (i == 2 or i == 4) and 'zset' or 'hash'
      if t ~= 'none' and t ~= want then
        return redis.error_reply('WRONGTYPE leasehold: ' .. k .. ' holds a ' .. t .. ', not a ' .. want .. ' of ours; it was left untouched')
      end
    end
  end
  return redis.error_reply(msg)
end
