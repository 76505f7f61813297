-- Starts a checkout: the holder of lock fence ARGV[1] is now working on this seat.
--
-- KEYS[1]  the seat's hash: fence (highest fence that touched it), buyer, replica, sold_at_ms
-- ARGV[1]  the caller's fence
--
-- Replies {status, fence}: {'ok', ARGV[1]} recorded; {'sold', stored} the seat has a buyer;
-- {'stale', stored} a newer lock holder has already touched the seat, so the caller's lease
-- must have expired: it must not go on.
--
-- Fences are below 2^53 (distlock mints at most the server time in microseconds, plus one per
-- grant), so Lua's doubles compare them exactly.
local stored = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0')
if redis.call('HEXISTS', KEYS[1], 'buyer') == 1 then
  return {'sold', stored}
end
local fence = tonumber(ARGV[1])
if fence < stored then
  return {'stale', stored}
end
redis.call('HSET', KEYS[1], 'fence', ARGV[1])
return {'ok', fence}
