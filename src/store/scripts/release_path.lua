-- release_path.lua (after holders.lua): give back a hierarchical lock's path (every level's
-- entry of the lease), and wake the hierarchy's waiters if one listens for a level it held.
--
-- KEYS[2(i-1)+1]  level i's holder set of the mode the lease holds there (holders.lua)
-- KEYS[2(i-1)+2]  level i's waited mark (acquire_path.lua)
-- ARGV[1]  the lease's token
-- ARGV[2]  the hierarchy's release channel (a pub/sub channel, not a key)
-- PUBLISH  set in front of this file: 'PUBLISH' on a single primary, 'SPUBLISH' on a cluster
--
-- Reply  1  released: the last level's entry was live; every level's entry is gone (and ''
--           was published on the channel if a level was waited for)
--        0  already expired: the entries had expired (they are pruned); nothing published
local token = ARGV[1]
local levels = #KEYS / 2
local now = clock_ms()
local live = holds(KEYS[2 * levels - 1], token, now)
local waited = false
for i = 1, levels do
  local set = KEYS[2 * (i - 1) + 1]
  remove_entries(set, token, 1)
  prune(set, now)
  stretch(set, now)
  waited = waited or redis.call('EXISTS', KEYS[2 * i]) == 1
end
if not live then
  return 0
end
if waited then
  redis.call(PUBLISH, ARGV[2], '')
end
return 1
