-- acquire_permits.lua (after fence.lua and holders.lua): take `count` permits of a semaphore
-- if that many are free, and mint the grant's fencing token. One call per acquire.
--
-- KEYS[1]  the semaphore's holder set (see holders.lua)
-- KEYS[2]  its fence key (fence.lua)
-- KEYS[3]  its waited mark: exists while a waiter listens, so that a release publishes
-- KEYS[4]  its claim: `<count>:<token>` of a waiter that has waited long. Permits it still
--          needs are kept for it: nobody else takes a permit that would leave it short.
-- ARGV[1]  the new token (unguessable, unique per lease: 32 hex digits, then
--              ".<holder identity>.<unix ms>" (src/token.rs); it never ends in "*" or "!")
-- ARGV[2]  count: permits asked for (1..=permits)
-- ARGV[3]  permits: the most that may be held at once, as this caller counts them
-- ARGV[4]  ttl in milliseconds (> 0)
-- ARGV[5]  whether the caller waits for a release: '0' no; otherwise it listens on the
--          release channel, so a busy reply also sets the waited mark; '2': it has waited
--          long, so a busy reply also claims its permits unless another waiter's claim
--          stands (a claimant that vanished holds it for at most the reply's wait + CLAIM_MS)
--
-- Reply  fence > 0      granted: `count` entries `<token>:1..count` now expire in ttl. Also
--                       when the token already holds live entries (a retry of a grant whose
--                       reply was lost): their ttl is reset and a new, higher fence returned.
--        -(wait + 1)    busy: fewer than `count` permits are free; `wait` is how many ms pass
--                       before enough entries of other holders expire, unless renewed
--
-- Never more than `permits` entries are live after a grant: a grant needs held + count <=
-- permits (+ what a claim keeps), with expired entries pruned first. A caller that counts fewer permits than the
-- entries held (the limit was lowered) is busy until enough of them have gone.
local CLAIM_MS = 250 -- keep in step with release.lua: how long a mark outlives the wait
local set, token, claim_key = KEYS[1], ARGV[1], KEYS[4]
local count, permits, ttl = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local now = clock_ms()
prune(set, now)
local held = redis.call('ZCARD', set)
-- Permits kept for another waiter's claim; a claim of this caller's own keeps nothing from it.
local claim, kept = redis.call('GET', claim_key), 0
local claimant
if claim then
  local colon = string.find(claim, ':', 1, true)
  claimant = string.sub(claim, colon + 1)
  if claimant ~= token then
    kept = tonumber(string.sub(claim, 1, colon - 1))
  end
end
if holds(set, token, now) or held + count + kept <= permits then
  put_entries(set, token, count, now + ttl, nil)
  stretch(set, now)
  if claimant == token then
    redis.call('DEL', claim_key)
  end
  return mint(KEYS[2], 1)
end
-- The (held + count + kept - permits)-th entry to expire frees the last permit needed; if
-- more are needed than are held, what is free is kept for a claim, for at most its life.
local need = held + count + kept - permits
local wait = 0
if need > held then
  wait = math.max(0, redis.call('PTTL', claim_key))
else
  local nth = redis.call('ZRANGE', set, need - 1, need - 1, 'WITHSCORES')
  if nth[2] then
    wait = math.max(0, tonumber(nth[2]) - now)
  end
end
if ARGV[5] ~= '0' then
  redis.call('SET', KEYS[3], '1', 'PX', wait + CLAIM_MS)
end
if ARGV[5] == '2' and (not claim or claimant == token) then
  redis.call('SET', claim_key, count .. ':' .. token, 'PX', wait + CLAIM_MS)
end
return -wait - 1
