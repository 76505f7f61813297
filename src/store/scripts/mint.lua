-- mint.lua (after fence.lua): mint the fences of leases that asked for theirs after their
-- grant (a lazy lease's first `fence()`), each only while its lock key still holds its token.
-- Concurrent mints of one client share one call (see src/store/batch.rs).
--
-- KEYS[2i-1]  lease i's lock key (it holds the token, maybe followed by a waiter's mark, '*' or
--             '!': see acquire.lua)
-- KEYS[2i]    lease i's fence key (the lock's: one per key prefix, or per hash slot on a cluster)
-- ARGV[i]     lease i's token
--
-- Reply  one integer per lease, in order (a bare integer when there is one, an array
--        otherwise):
--   fence > 0   minted: the key held the token; the fence is higher than every fence minted
--               before under the fence key, so higher than that of every earlier holder that
--               minted one (an earlier holder minted while it held, before this grant)
--   0           the key is gone (the lease expired): nothing minted
--   -1          another token holds it: nothing minted
local n = #KEYS / 2
local replies = {}
for i = 1, n do
  local holder, token = redis.call('GET', KEYS[2 * i - 1]), ARGV[i]
  if holder == token or holder == token .. '*' or holder == token .. '!' then
    replies[i] = mint(KEYS[2 * i], 1)
  elseif holder == false then
    replies[i] = 0
  else
    replies[i] = -1
  end
end
if n == 1 then
  return replies[1]
end
return replies
