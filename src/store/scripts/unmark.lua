-- unmark.lua: a waiter that marked a lock as starving ('!', see acquire.lua) gives up waiting
-- (timed out, cancelled), and no other waiter of its client starves on it: take the mark back
-- so that the next release does not reserve the lock for nobody.
--
-- KEYS[1]  the lock's key
--
-- The holder's 'T!' becomes 'T*' (its release still wakes the waiters that listen); a lock
-- already reserved ('!') is freed. Starving waiters of other clients, if any, lose their
-- priority for this one release only: they are woken as before and mark the lock again on
-- their next attempt.
--
-- Reply  1 if a mark was taken back, 0 if there was none
local holder = redis.call('GET', KEYS[1])
if holder == false or string.byte(holder, -1) ~= 33 then -- 33: '!'
  return 0
end
if holder == '!' then
  redis.call('DEL', KEYS[1])
else
  redis.call('SETRANGE', KEYS[1], #holder - 1, '*')
end
return 1
