-- acquire_write.lua (after fence.lua and holders.lua): take the write hold of a read-write
-- lock if nobody holds it, and mint the grant's fencing token. Same KEYS and ARGV as
-- acquire_read.lua.
--
-- Reply  fence > 0      granted: the writer's key holds the token (marked '*' if a waiter
--                       listens, so that its release, release_writer.lua, publishes). Also when the
--                       key already holds the token (a retry): its ttl is reset.
--        -(wait + 1)    busy: another writer holds it for `wait` more ms, or readers do (the
--                       latest of them expires in `wait` ms unless renewed)
--
-- A writer that waits behind readers sets the intent key for as long as its wait (plus a
-- claim time, in case it vanished), which keeps new readers out (acquire_read.lua); it sets it
-- again at every attempt, and the writer that gets in deletes it.
local CLAIM_MS = 250 -- keep in step with release.lua: how long a mark outlives the wait
local writer_key, readers, intent, waited = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token, ttl, waits = ARGV[1], ARGV[2], ARGV[3]
local now = clock_ms()
prune(readers, now)
local writer = redis.call('GET', writer_key)
if writer == token or writer == token .. '*' or writer == token .. '!' then
  redis.call('PEXPIRE', writer_key, ttl)
  return mint(KEYS[5], 1)
end
if writer then
  return writer_busy(writer_key, writer, waits)
end
local last = redis.call('ZRANGE', readers, -1, -1, 'WITHSCORES')
if last[2] then
  local wait = math.max(0, tonumber(last[2]) - now)
  if waits ~= '0' then
    redis.call('SET', intent, '1', 'PX', wait + CLAIM_MS)
    redis.call('SET', waited, '1', 'PX', wait + CLAIM_MS)
  end
  return -wait - 1
end
-- Free. Readers held back by a waiting writer marked the readers' side: this writer's release
-- must wake them, as must one that other local waiters wait behind ('2', '3').
local marked = waits == '2' or waits == '3' or redis.call('EXISTS', waited) == 1
redis.call('SET', writer_key, marked and token .. '*' or token, 'PX', ttl)
redis.call('DEL', intent)
return mint(KEYS[5], 1)
