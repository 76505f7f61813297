-- acquire.lua: take one or more locks, each if it is free, and mint their fencing tokens.
-- Concurrent acquires of one client share one call (see src/store/batch.rs).
--
-- KEYS[2i-1]  lock i's key        (string: the holder's token)
-- KEYS[2i]    lock i's fence key  (string: the last fence handed out under the key prefix;
--             one key serves every lock of a prefix, so items usually share it)
-- ARGV[2i-1]  lock i's new token  (unguessable, unique per lease)
-- ARGV[2i]    lock i's ttl in milliseconds (> 0)
--
-- Reply  one integer per lock, in order (a bare integer when there is one lock, an array
--        otherwise):
--   fence > 0       granted. Also when the key already holds the token (a retry of a grant
--                   whose reply was lost): the ttl is reset and a new, higher fence returned.
--   -(pttl + 1)     busy: another token holds the lock for pttl more milliseconds; 0 when the
--                   key has no expiry (pttl -1), which this library never creates.
--
-- A fence is max(last + 1, server time in microseconds): fences strictly increase per lock
-- (and per prefix) even if the fence key was lost to a failover or a flush, as long as the
-- server clock does not step back further than the fences handed out since. A call that
-- grants several locks hands out consecutive numbers, so a fence leads the clock by at most
-- the number of grants in one call.
local now = redis.call('TIME')
local now_us = tonumber(now[1]) * 1000000 + tonumber(now[2])
local last = {}
local reply = {}
for i = 1, #KEYS / 2 do
  local key, fence_key = KEYS[2 * i - 1], KEYS[2 * i]
  local token, ttl = ARGV[2 * i - 1], ARGV[2 * i]
  local granted = redis.call('SET', key, token, 'NX', 'PX', ttl)
  if not granted and redis.call('GET', key) == token then
    redis.call('PEXPIRE', key, ttl)
    granted = true
  end
  if granted then
    local prev = last[fence_key]
    if prev == nil then
      prev = tonumber(redis.call('GET', fence_key) or '0') or 0
    end
    local fence = prev + 1
    if fence < now_us then
      fence = now_us
    end
    last[fence_key] = fence
    reply[i] = fence
  else
    reply[i] = -redis.call('PTTL', key) - 1
  end
end
for fence_key, fence in pairs(last) do
  redis.call('SET', fence_key, string.format('%.0f', fence))
end
if #reply == 1 then
  return reply[1]
end
return reply
