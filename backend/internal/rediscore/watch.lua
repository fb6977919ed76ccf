-- ARGV: life_ms
-- Some Store watches the key for life_ms more: until then every call that grants a new lease,
-- releases one or gives one back publishes on the key's changed channel. The deadline is the
-- counter watch (see the header), and the lease hash lives at least as long. Returns 1.
load(all)
local life = tonumber(ARGV[1])
if meta.watch < now_ms + life then
  setm('watch', now_ms + life)
end
keep(life)
return 1
