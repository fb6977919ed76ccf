-- state_of returns the key's state as HGETALL reads a lease hash: the hash, or the hash a lone lease
-- s (GET's reply; nil: read it now) stands for (see unlone, which writes it in the lone lease's
-- place when writes_back). A key of another type fails the call.
local function state_of(s, writes_back)
  if not s then
    local all = redis.pcall('HGETALL', state)
    if not all.err then return all end
    s = redis.pcall('GET', state)
    if type(s) ~= 'string' then return redis.call('HGETALL', state) end
  end
  return unlone(s, writes_back)
end

-- call runs main with the key's state, all (or, when nil, as state_of reads it now from the lone
-- lease s, or from the key), and the script's arguments, args; and, when writes_back (every call
-- but a read-only one), writes what main changed (or deletes the hash of a key left idle:
-- settle) and tells the key's watchers.
local function call(main, writes_back, all, s, args)
  local r = main(all or state_of(s, writes_back), unpack(args))
  if writes_back then
    settle()
    if tell then redis.call('PUBLISH', string.sub(state, 1, -6) .. 'changed', '') end
  end
  return r
end

-- ours says the key k of type t is of the type the scripts keep there: the lease key a hash or
-- a lone lease, the line's keys a sorted set (2 and 4) or a hash (3).
local function ours(i, k, t)
  if t == 'none' then return true end
  if i == 1 then
    return t == 'hash' or (t == 'string' and lone_fields(redis.call('GET', k)) ~= nil)
  end
  return t == ((i == 2 or i == 4) and 'zset' or 'hash')
end

-- guarded runs one call of an operation, its lone tier lone, its fast path fast (nil: none) and
-- its general path main, with keys and args (see call), and turns a wrong-type failure into an
-- error naming the key at fault. The lone tier runs first, and reads the key (GET) only for a call
-- a lone lease could serve (see lone_read); the fast path next, on the lease hash read by a
-- HGETALL, unless the lone tier found a string. Both run outside the pcall (a wrong type's error is returned, not raised, by the
-- reads they run on): a write Redis refuses there (out of memory under EVALSHA, an ACL) fails the
-- call with Redis's own error, before anything is written. A tier that returns nil wrote nothing,
-- and the next decides.
local function guarded(main, fast, lone, keys, args, writes_back)
  begin(keys)
  local all, s
  if lone then
    local r = lone(unpack(args))
    if r then return r end
    if lone_got == false then all = {} elseif lone_got ~= true then s = lone_got end
  end
  if fast and not s then
    all = all or redis.pcall('HGETALL', state)
    if all.err then
      all = nil
    else
      local r = fast(all, unpack(args))
      if r then return r end
    end
  end
  tick()
  local ok, res = pcall(call, main, writes_back, all, s, args)
  if ok then return res end
  local msg = type(res) == 'table' and res.err or tostring(res)
  if string.find(msg, 'WRONGTYPE', 1, true) then
    for i, k in ipairs(KEYS) do
      local t = redis.call('TYPE', k)['ok']
      if not ours(i, k, t) then
        local want = (i == 2 or i == 4) and 'zset' or 'hash'
        return redis.error_reply('WRONGTYPE leasehold: ' .. k .. ' holds a ' .. t .. ', not a ' .. want .. ' of ours; it was left untouched')
      end
    end
  end
  return redis.error_reply(msg)
end
