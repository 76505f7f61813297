-- acquire.lua: take one or more locks, each if it is free, and mint their fencing tokens.
-- Concurrent acquires of one client share one call (see src/store/batch.rs).
--
-- KEYS[2i-1]  lock i's key        (string: the holder's token, followed by '*' once someone
--             waits for its release: see release.lua)
-- KEYS[2i]    lock i's fence key  (string: the last fence handed out under the key prefix;
--             one key serves every lock of a prefix, so items usually share it)
-- ARGV[3i-2]  lock i's new token  (unguessable, unique per lease)
-- ARGV[3i-1]  lock i's ttl in milliseconds (> 0)
-- ARGV[3i]    whether the caller waits for a release: '0' no; '1' it listens on the release
--             channel, so mark a busy lock as waited for; '2' also mark the lock if it is
--             granted (other waiters of the caller's client may still be asleep on it)
--
-- Reply  one integer per lock, in order (a bare integer when there is one lock, an array
--        otherwise):
--   fence > 0       granted. Also when the key already holds the token, marked or not (a
--                   retry of a grant whose reply was lost): the ttl is reset and a new,
--                   higher fence returned.
--   -(pttl + 1)     busy: another token holds the lock for pttl more milliseconds; 0 when the
--                   key has no expiry (pttl -1), which this library never creates.
--
-- A release publishes a wake-up only if the lock is marked as waited for, so an uncontended
-- release publishes nothing. A waiter marks the lock once it has registered on the channel
-- (with its client's subscription made, or under way when another local waiter made it: a
-- release in that window can be missed, as before, and costs the waiter at most the
-- holder's ttl). A release wakes one waiter per client; the woken one marks the lock it
-- finds busy, or the lock it is granted while others of its client still wait.
--
-- Fences come from fence.lua (concatenated in front): every run of consecutive grants under
-- one fence key (busy items in between do not break a run) gets consecutive numbers from one
-- write, after every lock of the call has been tried.
local n = #KEYS / 2
-- true for a grant until its fence is known, then the fence; -(pttl + 1) when busy.
local replies = {}
for i = 1, n do
  local key = KEYS[2 * i - 1]
  local token, ttl, waits = ARGV[3 * i - 2], ARGV[3 * i - 1], ARGV[3 * i]
  local granted = redis.call('SET', key, waits == '2' and token .. '*' or token, 'NX', 'PX', ttl)
  if not granted then
    local holder = redis.call('GET', key)
    if holder == token or holder == token .. '*' then
      redis.call('PEXPIRE', key, ttl)
      granted = true
    elseif waits ~= '0' and string.byte(holder, -1) ~= 42 then -- 42: '*'
      redis.call('APPEND', key, '*')
    end
  end
  if granted then
    replies[i] = true
  else
    replies[i] = -redis.call('PTTL', key) - 1
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
