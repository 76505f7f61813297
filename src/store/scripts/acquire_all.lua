-- acquire_all.lua (after fence.lua): take several locks all or nothing, and mint their
-- fencing tokens. One call per group of a multi-lock: every lock of the call on one node (on
-- a cluster, in one hash slot).
--
-- KEYS[2i-1]  lock i's key (a lock key, as acquire.lua writes it)
-- KEYS[2i]    lock i's fence key
-- ARGV[i]     lock i's new token (i = 1..n; unguessable, unique per lease: 32 hex digits, then
--              ".<holder identity>.<unix ms>" (src/token.rs); it never ends in "*" or "!")
-- ARGV[n+1]   the ttl of every lock in milliseconds (> 0)
-- ARGV[n+2]   whether the caller waits for a release: '0' no; otherwise the busy lock is
--             marked as waited for ('*'), so that its release publishes
--
-- Reply  an array: the n fences (each > 0) when every lock was free (or already held by its
--        token: a retry) and is now taken; or { -(pttl + 1), i } when lock i (the first one
--        found busy, or reserved for a starving waiter) is held for pttl more ms, and nothing
--        was taken.
local n = #KEYS / 2
local ttl, waits = ARGV[n + 1], ARGV[n + 2]
for i = 1, n do
  local key, token = KEYS[2 * i - 1], ARGV[i]
  local holder = redis.call('GET', key)
  if holder and holder ~= token and holder ~= token .. '*' and holder ~= token .. '!' then
    if waits ~= '0' then
      local last = string.byte(holder, -1)
      if last ~= 42 and last ~= 33 then -- 42: '*', 33: '!'
        redis.call('APPEND', key, '*')
      end
    end
    return { -math.max(0, redis.call('PTTL', key)) - 1, i }
  end
end
local fences = {}
for i = 1, n do
  local key, token = KEYS[2 * i - 1], ARGV[i]
  local holder = redis.call('GET', key)
  if holder then
    -- A retry: ours already; keep its mark.
    redis.call('PEXPIRE', key, ttl)
  else
    redis.call('SET', key, token, 'PX', ttl)
  end
end
-- Fences: consecutive numbers for each run of locks under one fence key.
local i = 1
while i <= n do
  local fence_key = KEYS[2 * i]
  local j = i
  while j + 1 <= n and KEYS[2 * (j + 1)] == fence_key do
    j = j + 1
  end
  local fence = mint(fence_key, j - i + 1)
  for k = i, j do
    fences[k] = fence + (k - i)
  end
  i = j + 1
end
return fences
