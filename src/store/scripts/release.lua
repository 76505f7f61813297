-- release.lua: delete one or more locks, each only if its token still holds it, and wake the
-- waiters of each, if any. Concurrent releases of one client share one call (see
-- src/store/batch.rs).
--
-- KEYS[i]       lock i's key
-- ARGV[2i-1]    lock i's token
-- ARGV[2i]      lock i's release channel (a pub/sub channel, not a key)
-- PUBLISH       set in front of this file: 'PUBLISH' on a single primary, 'SPUBLISH' (sharded
--               pub/sub, in the lock's own slot) on a cluster
--
-- The key holds the token, or the token and a mark (acquire.lua): '*' when a waiter listens,
-- '!' when a waiter has waited long. Unmarked, the key is deleted and nothing is published,
-- so an uncontended release costs no PUBLISH. Marked '*', it is deleted and '' is published.
-- Marked '!', the lock is not freed for anyone: it is reserved ('!') for a starving waiter
-- for CLAIM_MS, and '!' is published; if no starving waiter takes it by then (it vanished),
-- it expires and is free for anyone.
--
-- Reply  one integer per lock, in order (a bare integer when there is one lock, an array
--        otherwise):
--        1  released: the key held the token; it was deleted or reserved (and the channel
--           published to if it was marked)
--        0  already expired: the key is gone; nothing was changed
--       -1  held by another token (or reserved); nothing was changed
local CLAIM_MS = 250 -- keep in step with src/lock/mod.rs CLAIM
local n = #KEYS
local reply = n > 1 and {} or nil
local result
for i = 1, n do
  local holder, token = redis.call('GET', KEYS[i]), ARGV[2 * i - 1]
  if holder == token then
    redis.call('DEL', KEYS[i])
    result = 1
  elseif holder == false then
    result = 0
  elseif holder == token .. '*' then
    redis.call('DEL', KEYS[i])
    redis.call(PUBLISH, ARGV[2 * i], '')
    result = 1
  elseif holder == token .. '!' then
    redis.call('SET', KEYS[i], '!', 'PX', CLAIM_MS)
    redis.call(PUBLISH, ARGV[2 * i], '!')
    result = 1
  else
    result = -1
  end
  if reply then
    reply[i] = result
  end
end
return reply or result
