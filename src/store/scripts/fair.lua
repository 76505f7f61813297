-- fair.lua (after fence.lua and holders.lua; PUBLISH set in front): the queue of a fair lock,
-- which grants its lock in the order its waiters arrived.
--
-- KEYS[1]  the lock key: a lock's (the holder's token, followed by '*' once a waiter listens,
--          so that release.lua publishes), renewed and released as any lock's
-- KEYS[2]  the queue: a sorted set of waiter ids, scored by arrival number (1, 2, ...)
-- KEYS[3]  the claims: a sorted set of the same waiter ids, scored by when each one's place
--          runs out (ms on the server's clock) unless the waiter asks again before then
-- KEYS[4]  the fence key (fence.lua)
-- ARGV[1]  'take', 'leave' or 'count'
--
-- take   ARGV[2] token (never ends in '*' or '!'), ARGV[3] ttl ms (> 0), ARGV[4] waiter id,
--        ARGV[5] '1' if the caller waits (it joins the queue when busy), '0' if it tries
--        once, ARGV[6] '1' to mint the grant's fence, ARGV[7] claim ms (> 0)
--        Reply  {code, ahead}: `ahead` is how many waiters queue ahead of the caller (after
--               a busy answer to a waiter; 0 otherwise), and `code`:
--               fence > 0   granted, fence minted; 0: granted, fence left for later (also
--                           when the lock already holds the token: a retried grant)
--               -(wait + 2) busy: the lock is held for `wait` ms, or free while another
--                           waiter's turn lasts `wait` ms more (−1: no expiry)
--        The lock is granted only when it is free and the caller is first in the queue (or
--        the queue is empty): a caller that does not wait never jumps the queue.
-- leave  ARGV[2] waiter id, ARGV[3] the lock's release channel. A waiter that gives up leaves
--        its place; if it was first and the lock is free, the next waiters are woken.
--        Reply 1.
-- count  Reply  how many waiters hold a place.
--
-- A waiter keeps its place by asking again before its claim runs out (the client asks at
-- least every claim/3); one that vanished (killed, partitioned) is dropped from the queue once
-- its claim is over, so a dead waiter holds the queue up for at most one claim. Both keys
-- expire with the latest claim.
local lock, queue, claims = KEYS[1], KEYS[2], KEYS[3]
local op = ARGV[1]
local now = clock_ms()

-- Waiters whose place ran out: a few hundred per call (the rest go on the next one).
local gone = redis.call('ZRANGEBYSCORE', claims, '-inf', now, 'LIMIT', 0, 256)
if #gone > 0 then
  redis.call('ZREM', queue, unpack(gone))
  redis.call('ZREM', claims, unpack(gone))
end

local function first()
  return redis.call('ZRANGE', queue, 0, 0)[1]
end

if op == 'count' then
  return redis.call('ZCARD', queue)
end

if op == 'leave' then
  local waiter = ARGV[2]
  local was_first = first() == waiter
  redis.call('ZREM', queue, waiter)
  redis.call('ZREM', claims, waiter)
  if was_first and redis.call('EXISTS', lock) == 0 and redis.call('ZCARD', queue) > 0 then
    redis.call(PUBLISH, ARGV[3], '')
  end
  return 1
end

local token, ttl, waiter, joins, mint_now = ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local claim = tonumber(ARGV[7])

local function granted()
  redis.call('ZREM', queue, waiter)
  redis.call('ZREM', claims, waiter)
  if mint_now == '1' then
    return {mint(KEYS[4], 1), 0}
  end
  return {0, 0}
end

local holder = redis.call('GET', lock)
if holder == token or holder == token .. '*' then
  redis.call('PEXPIRE', lock, ttl)
  return granted()
end
local next_up = first()
if not holder and (next_up == nil or next_up == waiter) then
  -- Its turn. Marked while others still queue, so that its release wakes them.
  local others = redis.call('ZCARD', queue) - (next_up == waiter and 1 or 0)
  redis.call('SET', lock, others > 0 and token .. '*' or token, 'PX', ttl)
  return granted()
end

local wait
if holder then
  wait = redis.call('PTTL', lock)
else
  wait = math.max(0, tonumber(redis.call('ZSCORE', claims, next_up) or now) - now)
end
if joins == '1' then
  if not redis.call('ZSCORE', queue, waiter) then
    local last = redis.call('ZRANGE', queue, -1, -1, 'WITHSCORES')
    redis.call('ZADD', queue, last[2] and tonumber(last[2]) + 1 or 1, waiter)
  end
  redis.call('ZADD', claims, now + claim, waiter)
  redis.call('PEXPIRE', queue, claim)
  redis.call('PEXPIRE', claims, claim)
  if holder then
    local last = string.byte(holder, -1)
    if last ~= 42 and last ~= 33 then -- 42: '*', 33: '!'
      redis.call('APPEND', lock, '*')
    end
  end
  -- How many arrived before it (ZCOUNT, not ZRANK: the ACL rules users already grant).
  local number = redis.call('ZSCORE', queue, waiter)
  return {-wait - 2, redis.call('ZCOUNT', queue, '-inf', '(' .. number)}
end
return {-wait - 2, 0}
