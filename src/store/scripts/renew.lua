-- renew.lua (after holders.lua): extend one or many leases, each only if its token still
-- holds it. Used for `Lease::extend` (one lease), for the watchdog's batched renewals (many
-- leases of one client in one round trip, locks and holder sets mixed), and to keep a lease
-- that has a minimum hold until its end. It never re-creates a key or an entry that is gone.
--
-- KEYS[1..n]        each lease's key: a lock key, or a holder set (see holders.lua)
-- ARGV[1..n]        the tokens expected (a lock key may also hold its token followed by a
--                   mark a waiter leaves, '*' or '!': see acquire.lua)
-- ARGV[n+1..2n]     the new ttl of each lease in milliseconds (> 0)
-- ARGV[2n+1..3n]    optional, how each lease holds its key: '0' (the default when these are
--                   absent) the lock key holds its token; k >= 1: the lease is k entries
--                   `<token>:1..k` of a holder set
--
-- Reply  an array of n integers, one per key, in order:
--        1  extended: the key held its token (or its entries were live) and now expires in
--           the given ttl (a mark stays)
--        0  gone: the key or the entries had expired; nothing was changed
--       -1  a lock key held by another token; nothing was changed
local n = #KEYS
local shaped = #ARGV >= 3 * n
local replies = {}
local now -- read once, for holder sets only
for i = 1, n do
  local entries = shaped and tonumber(ARGV[2 * n + i]) or 0
  if entries == 0 then
    local holder = redis.call('GET', KEYS[i])
    if holder == ARGV[i] or holder == ARGV[i] .. '*' or holder == ARGV[i] .. '!' then
      redis.call('PEXPIRE', KEYS[i], ARGV[n + i])
      replies[i] = 1
    elseif holder == false then
      replies[i] = 0
    else
      replies[i] = -1
    end
  else
    now = now or clock_ms()
    if holds(KEYS[i], ARGV[i], now) then
      put_entries(KEYS[i], ARGV[i], entries, now + tonumber(ARGV[n + i]), 'XX')
      stretch(KEYS[i], now)
      replies[i] = 1
    else
      replies[i] = 0
    end
  end
end
return replies
