-- release.lua: delete a lock only if this token still holds it, and wake one waiter.
--
-- KEYS[1]  the lock key
-- ARGV[1]  the holder's token
-- ARGV[2]  the lock's release channel (a pub/sub channel, not a key)
--
-- Reply  1  released: the key held ARGV[1]; it was deleted and ARGV[2] was published to
--        0  already expired: the key is gone; nothing was changed
--       -1  held by another token; nothing was changed
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], '')
  return 1
end
if holder == false then
  return 0
end
return -1
