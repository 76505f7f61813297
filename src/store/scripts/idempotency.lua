-- idempotency.lua: the record of an idempotency key (src/idempotency.rs is the API; the
-- in-memory store's twin is in src/store/memory/mod.rs, `records`).
--
-- A key's first request runs under a lock (acquire.lua, the claim); its finished response is
-- stored as the record, and only while the claim is still held, so a request whose lease
-- expired (and whose key another request may have claimed since) never overwrites anything.
-- The record is opaque here: the client encodes and decodes it.
--
-- A read, ARGV[1] = 'g':
-- KEYS[1]  the record (a string)
-- Reply    the record, or nil
--
-- A store, ARGV[1] = 's':
-- KEYS[1]  the record
-- KEYS[2]  the claim's lock key (same hash tag): its value is the holder's token, maybe
--          followed by a waiter's mark ('*' or '!', see acquire.lua)
-- ARGV[2]  the claim's token
-- ARGV[3]  the record's ttl in milliseconds (> 0)
-- ARGV[4]  the record
-- Reply    1  stored (the claim was held by the token)
--          0  not stored: the lock is gone or held by another token; nothing was changed
if ARGV[1] == 'g' then
  return redis.call('GET', KEYS[1])
end
local held = redis.call('GET', KEYS[2])
local token = ARGV[2]
if held ~= token and held ~= token .. '*' and held ~= token .. '!' then
  return 0
end
redis.call('SET', KEYS[1], ARGV[4], 'PX', ARGV[3])
return 1
