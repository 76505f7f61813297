-- ratelimit/sliding_window.lua: the sliding window counter. Mirrors
-- src/ratelimit/algorithm/sliding_window.rs (same double expressions in the same order, so
-- both stores agree to the bit).
--
-- sliding_window(key, now, cost, need, period, limit) with the contract of common.lua.
-- key      string "<index>:<prev>:<curr>": the current window's index and the counts of the
--          previous and current windows
-- period   the window length in µs
-- limit    how many per sliding window (estimated)
local function sliding_window(key, now, cost, need, period, limit)
  local index = idiv(now, period)
  local prev, curr = 0, 0
  local stored = redis.call('GET', key)
  if stored then
    local i, p, c = string.match(stored, '^(%d+):(%d+):(%d+)$')
    if i then
      i = tonumber(i)
      if i == index then
        prev, curr = tonumber(p), tonumber(c)
      elseif i == index - 1 then
        prev = tonumber(c)
      end
    end
  end
  local elapsed = now - index * period
  -- The previous window's share still inside (now - period, now], rounded up.
  local weighted = math.ceil(prev * (period - elapsed) / period)
  local function reset(c)
    if c > 0 then
      return 2 * period - elapsed
    elseif prev > 0 then
      return period - elapsed
    end
    return 0
  end
  local d = { remaining = non_negative(limit - weighted - curr), reset = reset(curr), retry = 0 }
  if weighted + curr + need > limit then
    d.allowed = false
    local room = limit - curr - need
    local retry
    if room >= 0 then
      -- Later in this window, once the previous window's weight has shrunk to `room`.
      retry = period - math.floor(room * period / prev) - elapsed
    else
      -- Next window, where this window's count becomes the weighted one.
      room = limit - need
      local at = 0
      if curr > 0 then
        at = non_negative(period - math.floor(room * period / curr))
      end
      retry = period - elapsed + at
    end
    if retry < 1 then
      retry = 1
    end
    d.retry = retry
    return d
  end
  d.allowed = true
  if cost > 0 then
    local new_curr = curr + cost
    d.after_remaining = non_negative(limit - weighted - new_curr)
    d.after_reset = reset(new_curr)
    d.apply = function(slack)
      redis.call('SET', key,
        int_str(index) .. ':' .. int_str(prev) .. ':' .. int_str(new_curr),
        'PX', ttl_ms(d.after_reset, slack))
    end
  end
  return d
end
