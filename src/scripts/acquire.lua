-- acquire.lua: take a lock if it is free, and mint its fencing token.
--
-- KEYS[1]  the lock key            (string: the holder's token)
-- KEYS[2]  the lock's fence key    (string: the last token handed out); same hash slot as KEYS[1]
-- ARGV[1]  the new holder's token  (unguessable, unique per lease)
-- ARGV[2]  lease ttl in milliseconds (> 0)
-- ARGV[3]  fence key ttl in milliseconds (> ARGV[2]); refreshed on every grant
--
-- Reply {1, fence, ttl}   granted. Also when KEYS[1] already holds ARGV[1] (a retry of a grant
--                          whose reply was lost): the ttl is reset and the same fence returned.
-- Reply {0, 0, pttl}      busy: another token holds the lock for pttl more milliseconds
--                          (-1: the key has no expiry, which this library never creates).
--
-- The fence is max(previous + 1, server time in microseconds), so tokens strictly increase per
-- lock even if the fence key expired or a failover lost its last increments, as long as the
-- server clock does not step back further than the tokens handed out since.
local ttl = tonumber(ARGV[2])
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ttl) then
  local now = redis.call('TIME')
  local now_us = tonumber(now[1]) * 1000000 + tonumber(now[2])
  local fence = tonumber(redis.call('GET', KEYS[2]) or '0') + 1
  if fence < now_us then
    fence = now_us
  end
  redis.call('SET', KEYS[2], string.format('%.0f', fence), 'PX', ARGV[3])
  return {1, fence, ttl}
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ttl)
  return {1, tonumber(redis.call('GET', KEYS[2]) or '0'), ttl}
end
return {0, 0, redis.call('PTTL', KEYS[1])}
