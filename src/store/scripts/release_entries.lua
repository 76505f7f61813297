-- release_entries.lua (after holders.lua): give back a lease's entries of a holder set (a
-- semaphore's permits, a read-write lock's reader), and wake the waiters if one listens.
--
-- KEYS[1]  the holder set
-- KEYS[2]  its waited mark (acquire_permits.lua, acquire_read.lua, acquire_write.lua)
-- ARGV[1]  the lease's token
-- ARGV[2]  how many entries it holds (count >= 1)
-- ARGV[3]  the release channel (a pub/sub channel, not a key)
-- PUBLISH  set in front of this file: 'PUBLISH' on a single primary, 'SPUBLISH' on a cluster
--
-- Reply  1  released: the entries were live and are gone (and '' was published on the
--           channel if a waiter had marked the set)
--        0  already expired: the entries had expired (they are pruned); nothing else changed
local set, token = KEYS[1], ARGV[1]
local now = clock_ms()
local live = holds(set, token, now)
remove_entries(set, token, tonumber(ARGV[2]))
prune(set, now)
stretch(set, now)
if not live then
  return 0
end
if redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call(PUBLISH, ARGV[3], '')
end
return 1
