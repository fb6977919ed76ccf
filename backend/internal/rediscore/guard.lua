-- call runs main with the lease hash, all (or, when nil, as it reads it now: a HGETALL, which
-- fails on a wrong type), main decoding it with load unless it takes a fast path that needs none
-- of the state load builds; and, when writes_back (every call but a read-only one), writes what
-- main changed (or deletes the hash of a key left idle: settle) and tells the key's watchers.
local function call(main, writes_back, all)
  local r = main(all or redis.call('HGETALL', state))
  if writes_back then
    settle()
    if tell then redis.call('PUBLISH', string.sub(state, 1, -6) .. 'changed', '') end
  end
  return r
end

-- guarded runs main for one call with keys and args (see call), and turns a wrong-type failure
-- into an error naming the key at fault. An operation with a quick path (see quick.lua) tries
-- it first, on the lease hash read by a HGETALL that returns a wrong type's error rather than
-- raise it: then main reads the hash again, and fails as it would have.
local function guarded(main, keys, args, writes_back, quick)
  begin(keys, args)
  local all
  if quick then
    all = redis.pcall('HGETALL', state)
    if all.err then
      all = nil
    else
      local r = quick(all)
      if r then return r end
    end
  end
  tick()
  local ok, res = pcall(call, main, writes_back, all)
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
