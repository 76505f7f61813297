-- handoff.lua: pass a lock straight from its holder to a waiter of the holder's client, in
-- place of a release and the waiter's next acquire (see src/lock/handoff.rs). Runs after
-- fence.lua; mints the waiter's fence only if its lease is eager.
--
-- KEYS[1]  the lock's key
-- KEYS[2]  its fence key
-- ARGV[1]  the holder's token
-- ARGV[2]  the waiter's new token (unguessable, unique per lease)
-- ARGV[3]  the waiter's ttl in milliseconds (> 0)
-- ARGV[4]  the lock's release channel
-- ARGV[5]  '1': mint the waiter's fence now (an eager lease); '0': its lease mints it when
--          first asked (mint.lua)
-- PUBLISH  set in front of this file, as for release.lua
--
-- Reply  fence > 0   passed: the key held the holder's token; it now holds the new one (still
--                    marked with '*' if it was, so its release wakes the other waiters), with
--                    the new ttl, and this is the new lease's fence ('1')
--        -3          passed as above, no fence minted ('0')
--        0           the key is gone (the holder's lease expired): nothing was changed
--        -1          another token holds it: nothing was changed
--        -2          not passed: a waiter has waited long (the '!' mark, see acquire.lua), so
--                    the lock is released as release.lua does it: reserved for a starving
--                    waiter (of any client), and '!' published
local CLAIM_MS = 250 -- keep in step with release.lua
local holder = redis.call('GET', KEYS[1])
if holder == false then
  return 0
end
if holder == ARGV[1] .. '!' then
  redis.call('SET', KEYS[1], '!', 'PX', CLAIM_MS)
  redis.call(PUBLISH, ARGV[4], '!')
  return -2
end
local marked = holder == ARGV[1] .. '*'
if holder ~= ARGV[1] and not marked then
  return -1
end
redis.call('SET', KEYS[1], marked and ARGV[2] .. '*' or ARGV[2], 'PX', ARGV[3])
if ARGV[5] == '1' then
  return mint(KEYS[2], 1)
end
return -3
