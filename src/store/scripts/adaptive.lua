-- adaptive.lua: a concurrency limit shared by every replica, moved by their votes
-- (src/adaptive.rs is the API; the in-memory store's twin is in src/store/memory/mod.rs,
-- `adaptive`).
--
-- The limit moves at most one step per window of server time, whatever the number of
-- replicas voting: the first "decrease" of a window multiplies it by the backoff (at least -1),
-- the first "increase" of a window adds the step unless the window has decreased it; every
-- other vote of the window leaves it. So replicas converge on one limit, and more replicas do
-- not make it swing harder.
--
-- KEYS[1]  the limit's state (a hash: l the limit, i the window it last rose in, d the
--          window it last fell in)
-- ARGV[1]  the vote: '+' increase, '-' decrease, '=' none (a read)
-- ARGV[2]  the limit when the state is new (min <= initial <= max)
-- ARGV[3]  the least limit (>= 1)
-- ARGV[4]  the greatest limit
-- ARGV[5]  the window in microseconds (> 0)
-- ARGV[6]  the backoff in thousandths (1..999)
-- ARGV[7]  the step (>= 1)
-- ARGV[8]  how long the state lives without a vote, in milliseconds (> 0)
-- Reply    the limit after the vote
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local least, most = tonumber(ARGV[3]), tonumber(ARGV[4])
local limit = tonumber(redis.call('HGET', KEYS[1], 'l'))
if not limit then
  limit = tonumber(ARGV[2])
end
-- Bounds may have changed since the state was written.
limit = math.max(least, math.min(most, limit))
local window = math.floor(now / tonumber(ARGV[5]))
local vote = ARGV[1]
if vote == '-' then
  if tonumber(redis.call('HGET', KEYS[1], 'd')) ~= window then
    local backed = math.floor(limit * tonumber(ARGV[6]) / 1000)
    limit = math.max(least, math.min(limit - 1, backed))
    redis.call('HSET', KEYS[1], 'd', window)
  end
elseif vote == '+' then
  if tonumber(redis.call('HGET', KEYS[1], 'i')) ~= window
      and tonumber(redis.call('HGET', KEYS[1], 'd')) ~= window then
    limit = math.min(most, limit + tonumber(ARGV[7]))
    redis.call('HSET', KEYS[1], 'i', window)
  end
end
redis.call('HSET', KEYS[1], 'l', limit)
redis.call('PEXPIRE', KEYS[1], ARGV[8])
return limit
