-- guarded runs main for one call with keys and args, and turns a wrong-type failure into an
-- error naming the key at fault.
local function guarded(main, keys, args)
  begin(keys, args)
  local ok, res = pcall(main)
  if ok then return res end
  local msg = type(res) == 'table' and res.err or tostring(res)
  if string.find(msg, 'WRONGTYPE', 1, true) then
    for i, k in ipairs(KEYS) do
      local t = redis.call('TYPE', k)['ok']
      local want = (i == 1 or i == 4 or i == 6) and 'zset' or 'hash'
      if t ~= 'none' and t ~= want then
        return redis.error_reply('WRONGTYPE leasehold: ' .. k .. ' holds a ' .. t .. ', not a ' .. want .. ' of ours; it was left untouched')
      end
    end
  end
  return redis.error_reply(msg)
end
