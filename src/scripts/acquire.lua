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
-- A fence is max(last + 1, server time in microseconds): fences strictly increase per lock
-- (and per prefix) even if the fence key was lost to a failover or a flush, as long as the
-- server clock does not step back further than the fences handed out since. A call that
-- grants several locks hands out consecutive numbers, so a fence leads the clock by at most
-- the number of grants in one call.
--
-- Cost: a grant under a fence key is one `SET fence now GET` (raise the key to the clock and
-- learn what it held) on the common path; only when the key is ahead of the clock (grants in
-- the same microsecond, or the clock stepped back), or when one call grants several locks
-- under one key, does the key get a second write with the exact last fence. The key never
-- holds less than a fence returned by an earlier call, even if this call fails part way
-- (Redis does not roll a script back): fences of this call that it has not written yet are
-- returned to nobody when it fails. Needs Redis 6.2 or newer (SET ... GET).
local n = #KEYS / 2
local reply = n > 1 and {} or nil
local now_str, now -- the server clock in µs (text and number), read at the first grant
-- The fence key in use, the last fence handed out under it, and whether the key lags behind
-- that fence. Items nearly always share one key; a switch writes the old key back first.
local fk, last, lags
local result
for i = 1, n do
  local key, fence_key = KEYS[2 * i - 1], KEYS[2 * i]
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
    if now_str == nil then
      local t = redis.call('TIME')
      now_str = t[1] .. string.sub('00000' .. t[2], -6)
      now = tonumber(now_str)
    end
    if fence_key ~= fk then
      if lags then
        redis.call('SET', fk, string.format('%.0f', last))
      end
      -- Raise the key to the clock and learn what it held: one write on the common path.
      local old = tonumber(redis.call('SET', fence_key, now_str, 'GET') or '0') or 0
      fk, last, lags = fence_key, now, false
      if old >= now then
        -- The key was ahead of the clock and was just lowered: put it back above at once. A
        -- script is not rolled back if a later item fails, so the key must never be left
        -- below a fence an earlier call returned.
        last = old + 1
        redis.call('SET', fk, string.format('%.0f', last))
      end
    else
      last, lags = last + 1, true
    end
    result = last
  else
    result = -redis.call('PTTL', key) - 1
  end
  if reply then
    reply[i] = result
  end
end
if lags then
  redis.call('SET', fk, string.format('%.0f', last))
end
return reply or result
