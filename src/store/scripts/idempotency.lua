-- idempotency.lua: the record of an idempotency key (src/idempotency.rs is the API; the
-- in-memory store's twin is in src/store/memory/mod.rs, `records`).
--
-- A key's first request runs under a lock (acquire.lua, the claim). Once it holds the claim
-- it leaves a "started" marker; its finished response replaces the marker as the record.
-- Every write happens only while the claim is still held, so a request whose lease expired
-- (and whose key another request may have claimed since) never overwrites anything. Records
-- and markers are opaque here: the client encodes and decodes them.
--
-- The claim's lock key holds the holder's token, maybe followed by a waiter's mark ('*' or
-- '!', see acquire.lua). Tokens are 32 lower-case hex digits (src/token.rs).
--
-- A read, ARGV[1] = 'g':
-- KEYS[1]  the record (a string)
-- Reply    the record, or nil
--
-- A start, ARGV[1] = 'b':
-- KEYS[1]  the record
-- KEYS[2]  the claim's lock key (same hash tag)
-- ARGV[2]  the claim's token
-- ARGV[3]  the marker's ttl in milliseconds (> 0)
-- ARGV[4]  the started marker, or '' to leave none
-- Reply    the record (or marker) already there, unchanged; else
--          1  the claim is held by the token: the marker was written (if any)
--          0  the claim is not held by the token: nothing was changed
--
-- A store, ARGV[1] = 's':
-- KEYS[1]  the record
-- KEYS[2]  the claim's lock key (same hash tag)
-- ARGV[2]  the claim's token
-- ARGV[3]  the record's ttl in milliseconds (> 0)
-- ARGV[4]  the record
-- Reply    1  stored (replacing the marker), the claim being held by the token
--          0  not stored: the lock is gone or held by another token; nothing was changed
--
-- A discard, ARGV[1] = 'd' (the request did nothing: its key may run again):
-- KEYS[1]  the record
-- KEYS[2]  the claim's lock key (same hash tag)
-- ARGV[2]  the claim's token
-- Reply    1  the marker was removed, the claim being held by the token
--          0  the claim is not held by the token: nothing was changed
if ARGV[1] == 'g' then
  return redis.call('GET', KEYS[1])
end
if ARGV[1] == 'b' then
  local found = redis.call('GET', KEYS[1])
  if found then
    return found
  end
end
local held = redis.call('GET', KEYS[2])
local token = ARGV[2]
if held ~= token and held ~= token .. '*' and held ~= token .. '!' then
  return 0
end
if ARGV[1] == 'd' then
  redis.call('DEL', KEYS[1])
elseif ARGV[1] == 's' or ARGV[4] ~= '' then
  redis.call('SET', KEYS[1], ARGV[4], 'PX', ARGV[3])
end
return 1
