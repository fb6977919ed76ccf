-- watch: PARAMS are life_ms.
-- Some Store watches the key for life_ms more: until then every call that grants a new lease,
-- releases one or gives one back publishes on the key's changed channel. The deadline is the
-- counter watch (see the header), and the lease hash lives at least as long. Returns 1.
local function watch(all, PARAMS)
  load(all)
  local life = tonumber(life_ms)
  if meta.watch < now_ms + life then
    setm('watch', now_ms + life)
  end
  keep(life)
  return 1
end
