-- Completes a checkout: sells the seat, if it has no buyer and no newer lock holder has
-- touched it since the caller's hold.
--
-- KEYS[1]  the seat's hash (see hold.lua)
-- KEYS[2]  the set of sold seat numbers
-- ARGV     fence, buyer, replica, sold_at_ms, seat number
--
-- Replies {status, fence} as hold.lua: 'ok' (sold to ARGV[2]), 'sold' or 'stale'.
local stored = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0')
if redis.call('HEXISTS', KEYS[1], 'buyer') == 1 then
  return {'sold', stored}
end
local fence = tonumber(ARGV[1])
if fence < stored then
  return {'stale', stored}
end
redis.call('HSET', KEYS[1], 'fence', ARGV[1], 'buyer', ARGV[2], 'replica', ARGV[3],
  'sold_at_ms', ARGV[4])
redis.call('SADD', KEYS[2], ARGV[5])
return {'ok', fence}
