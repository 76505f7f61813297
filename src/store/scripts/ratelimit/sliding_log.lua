-- ratelimit/sliding_log.lua: the sliding log. Mirrors src/ratelimit/algorithm/sliding_log.rs.
--
-- sliding_log(key, now, cost, need, period, limit) with the contract of common.lua.
-- key      sorted set: one member per allowed cost unit, scored by its time in µs; members
--          are "<time>:<n>", n counting the members already at that time, so they are
--          unique. Denied requests are never added; the set is capped at `limit` members.
-- period   the window length in µs
-- limit    how many per sliding window (exact); at most 10 000, so the loops below are
--          bounded by it
local function sliding_log(key, now, cost, need, period, limit)
  local floor = now - period
  local count = tonumber(redis.call('ZCOUNT', key, '(' .. int_str(floor), '+inf'))
  local reset = 0
  local newest = nil
  if count > 0 then
    newest = tonumber(redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2])
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
      redis.call('ZREMRANGEBYSCORE', key, '-inf', int_str(floor))
      local stamp = int_str(now)
      local taken = tonumber(redis.call('ZCOUNT', key, stamp, stamp))
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
      redis.call('PEXPIRE', key, ttl_ms(d.after_reset, slack))
    end
  end
  return d
end
