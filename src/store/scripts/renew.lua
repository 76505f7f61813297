-- renew.lua: extend one or many leases, each only if its token still holds it.
-- Used for `Lease::extend` (one lease) and for the watchdog's batched renewals (many leases
-- of one client in one round trip). It never re-creates a key that is gone.
--
-- KEYS[1..n]        lock keys
-- ARGV[1..n]        the tokens expected in KEYS[1..n] (a key may also hold its token followed
--                   by a mark a waiter leaves, '*' or '!': see acquire.lua)
-- ARGV[n+1..2n]     the new ttl of each lease in milliseconds (> 0)
--
-- Reply  an array of n integers, one per key, in order:
--        1  extended: the key held its token and now expires in the given ttl (a mark
--           stays)
--        0  gone: the key had expired; nothing was changed
--       -1  held by another token; nothing was changed
local n = #KEYS
local replies = {}
for i = 1, n do
  local holder = redis.call('GET', KEYS[i])
  if holder == ARGV[i] or holder == ARGV[i] .. '*' or holder == ARGV[i] .. '!' then
    redis.call('PEXPIRE', KEYS[i], ARGV[n + i])
    replies[i] = 1
  elseif holder == false then
    replies[i] = 0
  else
    replies[i] = -1
  end
end
return replies
