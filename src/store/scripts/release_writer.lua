-- release_writer.lua: release the write hold of a read-write lock if the token still holds
-- it, and wake both sides if a waiter listens (see acquire_read.lua, acquire_write.lua).
--
-- KEYS[1]  the writer's key (a lock key: the token, marked '*' once a waiter listens)
-- ARGV[1]  the writer's token
-- ARGV[2]  the writers' release channel (other writers wait there)
-- ARGV[3]  the readers' channel (readers wait there: only a writer's release frees anything
--          for them)
-- PUBLISH  set in front of this file, as for release.lua
--
-- Reply  1  released (and '' published on both channels if the key was marked)
--        0  already expired: the key is gone; nothing was changed
--       -1  another token holds it; nothing was changed
local holder, token = redis.call('GET', KEYS[1]), ARGV[1]
if holder == false then
  return 0
end
if holder ~= token and holder ~= token .. '*' and holder ~= token .. '!' then
  return -1
end
redis.call('DEL', KEYS[1])
if holder ~= token then
  redis.call(PUBLISH, ARGV[2], '')
  redis.call(PUBLISH, ARGV[3], '')
end
return 1
