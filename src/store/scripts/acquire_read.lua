-- acquire_read.lua (after fence.lua and holders.lua): take a read hold on a read-write lock
-- if no writer holds it and none is waiting, and mint the grant's fencing token.
--
-- KEYS[1]  the writer's key: a lock key (holds the writer's token, marked '*' once a waiter
--          listens, exactly as acquire.lua writes a lock)
-- KEYS[2]  the readers' holder set (see holders.lua); a reader is one entry `<token>:1`
-- KEYS[3]  the intent key: exists while a writer waits for the readers to leave
-- KEYS[4]  the readers' waited mark: exists while a waiter listens for a reader's release
-- KEYS[5]  the fence key (fence.lua), shared with the writers' grants
-- ARGV[1]  the new token (unguessable, unique per lease: 32 hex digits, then
--              ".<holder identity>.<unix ms>" (src/token.rs); it never ends in "*" or "!")
-- ARGV[2]  ttl in milliseconds (> 0)
-- ARGV[3]  whether the caller waits for a release: '0' no; otherwise a busy reply also marks
--          what it waits for, so that its release publishes
--
-- Reply  fence > 0      granted (also when the token already holds a live entry: a retry of
--                       a grant whose reply was lost; its ttl is reset)
--        -(wait + 1)    busy: a writer holds the lock for `wait` more ms, or a writer waits
--                       and keeps new readers out for `wait` more ms (unless it renews that)
--
-- A waiting writer blocks new readers: that is what keeps a stream of readers from starving
-- writers (acquire_write.lua sets the intent key).
local CLAIM_MS = 250 -- keep in step with release.lua: how long a mark outlives the wait
local writer_key, readers, intent, waited = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token, ttl, waits = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local now = clock_ms()
prune(readers, now)
if not holds(readers, token, now) then
  local writer = redis.call('GET', writer_key)
  if writer then
    return writer_busy(writer_key, writer, waits)
  end
  local wanted = redis.call('PTTL', intent)
  if wanted > 0 then
    if waits ~= '0' then
      -- The writer to come finds this mark and publishes when it releases.
      redis.call('SET', waited, '1', 'PX', wanted + CLAIM_MS)
    end
    return -wanted - 1
  end
end
put_entries(readers, token, 1, now + ttl, nil)
stretch(readers, now)
return mint(KEYS[5], 1)
