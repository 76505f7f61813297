-- ratelimit/sliding_log.lua: the sliding log. Mirrors src/store/ratelimit/sliding_log.rs.
--
-- sliding_log(key, now, cost, need, period, limit, keep) with the contract of common.lua.
-- key      sorted set: one member per allowed cost unit, scored by its time in µs; members
--          are "<time>:<n>", n numbering the members at that time, so they are unique.
--          Denied requests are never added; the set is capped at `limit` members.
-- period   the window length in µs
-- limit    how many per sliding window (exact); at most 10 000, so the loops below are
--          bounded by it
-- keep     how long the log outlives its newest entry, in µs (at least `period`)
--
-- The entries are times, so a change of the subject's rate needs no conversion: the window
-- in force counts the entries the log holds. A write trims the log by its cap only (the
-- newest `limit` entries stay, however old), never by the window in force, and the log
-- expires `keep` after its newest entry: so a window made longer later (a new plan, a
-- deploy) still counts the entries of the old one, as long as the log lives. (Trimming by
-- the window in force, and expiring with it, was issue 28's defect: a longer window forgot
-- every entry older than the old one.)

-- Entries in the window ending at `now`.
local function log_count(key, now, period)
  return tonumber(redis.call('ZCOUNT', key, '(' .. int_str(now - period), '+inf'))
end

-- Adds `cost` entries at `now`, caps the log at its newest `limit` entries, and sets its ttl
-- to `ttl` µs plus `slack` ms. Entries older than the window stay (see the header).
local function log_append(key, now, limit, cost, ttl, slack)
  local stamp = int_str(now)
  -- Numbered after the highest number at this time, not after how many there are: a refund
  -- (ZPOPMAX) takes the member that sorts last, "t:9" before "t:10", and a number reused
  -- would overwrite an entry instead of adding one.
  local taken = 0
  for _, member in ipairs(redis.call('ZRANGEBYSCORE', key, stamp, stamp)) do
    local n = tonumber(string.match(member, ':(%d+)$'))
    if n and n > taken then
      taken = n
    end
  end
  local batch = {}
  for n = 1, cost do
    batch[#batch + 1] = stamp
    batch[#batch + 1] = stamp .. ':' .. int_str(taken + n)
    if #batch >= 200 or n == cost then
      redis.call('ZADD', key, unpack(batch))
      batch = {}
    end
  end
  local size = tonumber(redis.call('ZCARD', key))
  if size > limit then
    redis.call('ZREMRANGEBYRANK', key, 0, size - limit - 1)
  end
  redis.call('PEXPIRE', key, ttl_ms(ttl, slack))
end

-- The newest entry's time, or nil when the window is empty.
local function log_newest(key, count)
  if count > 0 then
    return tonumber(redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2])
  end
  return nil
end

local function sliding_log(key, now, cost, need, period, limit, keep)
  local floor = now - period
  local count = log_count(key, now, period)
  local reset = 0
  local newest = log_newest(key, count)
  if newest then
    reset = newest + period - now
  end
  local d = { remaining = non_negative(limit - count), reset = reset, retry = 0 }
  if count + need > limit then
    -- The oldest entries that must slide out first; the last of them sets the wait.
    local must_expire = count + need - limit
    local oldest = redis.call('ZRANGEBYSCORE', key, '(' .. int_str(floor), '+inf',
      'WITHSCORES', 'LIMIT', must_expire - 1, 1)
    d.allowed = false
    d.retry = tonumber(oldest[2]) + period - now
    return d
  end
  d.allowed = true
  if cost > 0 then
    if newest == nil or newest < now then
      newest = now
    end
    d.after_remaining = non_negative(limit - count - cost)
    d.after_reset = newest + period - now
    d.apply = function(slack)
      log_append(key, now, limit, cost, newest + keep - now, slack)
    end
  end
  return d
end

-- Gives back (delta < 0) the newest entries of the window, or charges (delta > 0) at most
-- what is left, as entries at `now`.
local function sliding_log_adjust(key, now, delta, period, limit, slack, keep)
  local count = log_count(key, now, period)
  if delta < 0 then
    local back = math.min(-delta, count)
    if back > 0 then
      redis.call('ZPOPMAX', key, back)
    end
    return
  end
  local add = math.min(delta, non_negative(limit - count))
  if add > 0 then
    local newest = log_newest(key, count)
    if newest == nil or newest < now then
      newest = now
    end
    log_append(key, now, limit, add, newest + keep - now, slack)
  end
end
