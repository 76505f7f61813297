-- acquire.lua: take one or more locks, each if it is free, and mint the fencing tokens of
-- those that ask for one now. The uncontended acquire of a lease that mints its fence later
-- does not come here: it is a plain `SET key token NX PX ttl`, and only a nil answer (busy, or
-- a retry that finds its own token) is sent here (see src/store/scripts/acquire.rs).
-- Concurrent acquires of one client share one call (see src/store/batch.rs).
--
-- KEYS[2i-1]  lock i's key        (string: see "The lock's value" below)
-- KEYS[2i]    lock i's fence key  (string: the last fence handed out under the key prefix, or
--             in lock i's hash slot on a cluster; items usually share it. Passed even when the
--             item does not mint, so that every key the script may touch is in KEYS)
-- ARGV[4i-3]  lock i's new token  (unguessable, unique per lease; hex digits only)
-- ARGV[4i-2]  lock i's ttl in milliseconds (> 0)
-- ARGV[4i-1]  whether the caller waits for a release: '0' no; '1' it listens on the release
--             channel, so mark a busy lock as waited for; '2' also mark the lock if it is
--             granted (other waiters of the caller's client may still be asleep on it);
--             '3' it has waited long ("starving"): as '2', and mark a busy lock so that its
--             release reserves it for starving waiters, and take a reserved lock
-- ARGV[4i]    '1': mint the grant's fence now (an eager lease); '0': leave it to the lease,
--             which mints it when first asked (mint.lua), if ever
--
-- Reply  one integer per lock, in order (a bare integer when there is one lock, an array
--        otherwise):
--   fence > 0       granted, and its fence minted ('1'). Also when the key already holds the
--                   token, marked or not (a retry of a grant whose reply was lost): the ttl is
--                   reset and a new, higher fence returned.
--   0               granted, no fence minted ('0'); the same for a retry.
--   -(pttl + 2)     busy: another token holds the lock (or it is reserved) for pttl more
--                   milliseconds; -1 when the key has no expiry (pttl -1), which this library
--                   never creates.
--
-- The lock's value:
--   T     held by token T
--   T*    held, and a waiter listens: its release publishes '' on the release channel
--   T!    held, and a waiter has waited long: its release reserves the lock ('!') and
--         publishes '!' (release.lua)
--   !     reserved: free for a starving waiter ('3') only, for a short claim time; then
--         it expires and the lock is free for anyone
-- So a client that releases and re-takes a lock at once cannot keep another client's
-- starving waiter out: its release reserves the lock for that waiter.
--
-- A release publishes a wake-up only if the lock is marked as waited for, so an uncontended
-- release publishes nothing. A waiter marks the lock once the server has confirmed its
-- subscription to the channel. A release wakes one waiter per client; the woken one marks
-- the lock it finds busy, or the lock it is granted while others of its client still wait.
--
-- Fences come from fence.lua (concatenated in front): every run of consecutive grants that
-- mint under one fence key (busy and unminted items in between do not break a run) gets
-- consecutive numbers from one write, after every lock of the call has been tried.
local n = #KEYS / 2
-- true for a grant that mints until its fence is known, then the fence; 0 for a grant that
-- does not mint; -(pttl + 2) when busy.
local replies = {}
for i = 1, n do
  local key = KEYS[2 * i - 1]
  local token, ttl, waits = ARGV[4 * i - 3], ARGV[4 * i - 2], ARGV[4 * i - 1]
  local marks_grant = waits == '2' or waits == '3'
  local granted = redis.call('SET', key, marks_grant and token .. '*' or token, 'NX', 'PX', ttl)
  if not granted then
    local holder = redis.call('GET', key)
    if holder == token or holder == token .. '*' or holder == token .. '!' then
      redis.call('PEXPIRE', key, ttl)
      granted = true
    elseif holder == '!' then
      if waits == '3' then
        redis.call('SET', key, token .. '*', 'PX', ttl)
        granted = true
      end
    elseif waits ~= '0' then
      local last = string.byte(holder, -1)
      if waits == '3' and last ~= 33 then -- 33: '!'
        if last == 42 then -- 42: '*'
          redis.call('SETRANGE', key, #holder - 1, '!')
        else
          redis.call('APPEND', key, '!')
        end
      elseif last ~= 42 and last ~= 33 then
        redis.call('APPEND', key, '*')
      end
    end
  end
  if not granted then
    replies[i] = -redis.call('PTTL', key) - 2
  elseif ARGV[4 * i] == '1' then
    replies[i] = true
  else
    replies[i] = 0
  end
end
local i = 1
while i <= n do
  if replies[i] == true then
    local fence_key = KEYS[2 * i]
    -- The run: this grant and the next ones under the same key, busy items skipped.
    local j, count = i, 0
    while j <= n and (replies[j] ~= true or KEYS[2 * j] == fence_key) do
      if replies[j] == true then
        count = count + 1
      end
      j = j + 1
    end
    local fence = mint(fence_key, count)
    for k = i, j - 1 do
      if replies[k] == true then
        replies[k] = fence
        fence = fence + 1
      end
    end
    i = j
  else
    i = i + 1
  end
end
if n == 1 then
  return replies[1]
end
return replies
