-- ratelimit/sliding_window.lua: the sliding window counter. Mirrors
-- src/store/ratelimit/sliding_window.rs (same double expressions in the same order, so
-- both stores agree to the bit).
--
-- sliding_window(key, now, cost, need, period, limit) with the contract of common.lua.
-- key      string "<index>:<prev>:<curr>:<period>": the current window's index, the counts
--          of the previous and current windows, and the period they were counted in
-- period   the window length in µs
-- limit    how many per sliding window (estimated)
--
-- Counts made under another period (the subject's rate changed) carry over as what they
-- weigh now (the previous window's weighted share plus the current count), counted in the
-- current window (rewritten so when first read).

-- The share of `prev` still inside the sliding window, `elapsed` µs into the current window,
-- rounded up.
local function sliding_weight(prev, period, elapsed)
  return math.ceil(prev * (period - elapsed) / period)
end

-- µs until the state stops mattering: until the current count has slid out of the next
-- window, or the previous one out of this one.
local function sliding_reset(prev, curr, period, elapsed)
  if curr > 0 then
    return 2 * period - elapsed
  elseif prev > 0 then
    return period - elapsed
  end
  return 0
end

-- Writes the counts (or deletes the key when both are zero) with a ttl of their reset time.
local function sliding_write(key, index, prev, curr, period, elapsed, slack)
  local reset = sliding_reset(prev, curr, period, elapsed)
  if reset <= 0 then
    redis.call('DEL', key)
    return
  end
  redis.call('SET', key,
    int_str(index) .. ':' .. int_str(prev) .. ':' .. int_str(curr) .. ':' .. int_str(period),
    'PX', ttl_ms(reset, slack))
end

-- The current window's index and the previous and current counts.
local function sliding_counts(key, now, period)
  local index = idiv(now, period)
  local stored = redis.call('GET', key)
  if stored then
    local i, p, c, per = string.match(stored, '^(%d+):(%d+):(%d+):(%d+)$')
    if i then
      i, p, c, per = tonumber(i), tonumber(p), tonumber(c), tonumber(per)
      if per == period then
        if i == index then
          return index, p, c
        elseif i == index - 1 then
          return index, c, 0
        end
      elseif per > 0 then
        local old = idiv(now, per)
        local old_prev, old_curr = 0, 0
        if i == old then
          old_prev, old_curr = p, c
        elseif i == old - 1 then
          old_prev = c
        end
        local carried = sliding_weight(old_prev, per, now - old * per) + old_curr
        -- Counted in the current window from now on (rewritten once).
        sliding_write(key, index, 0, carried, period, now - index * period, slack)
        return index, 0, carried
      end
    end
  end
  return index, 0, 0
end

local function sliding_window(key, now, cost, need, period, limit)
  local index, prev, curr = sliding_counts(key, now, period)
  local elapsed = now - index * period
  local weighted = sliding_weight(prev, period, elapsed)
  local d = {
    remaining = non_negative(limit - weighted - curr),
    reset = sliding_reset(prev, curr, period, elapsed),
    retry = 0,
  }
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
    d.after_reset = sliding_reset(prev, new_curr, period, elapsed)
    d.apply = function(slack)
      sliding_write(key, index, prev, new_curr, period, elapsed, slack)
    end
  end
  return d
end

-- Gives back (delta < 0) the newest units first (this window's, then the previous one's), or
-- charges (delta > 0) at most what is left, in this window.
local function sliding_window_adjust(key, now, delta, period, limit, slack)
  local index, prev, curr = sliding_counts(key, now, period)
  local elapsed = now - index * period
  if delta < 0 then
    local back = -delta
    local from_curr = math.min(back, curr)
    curr = curr - from_curr
    prev = non_negative(prev - (back - from_curr))
  else
    local left = non_negative(limit - sliding_weight(prev, period, elapsed) - curr)
    curr = curr + math.min(delta, left)
  end
  sliding_write(key, index, prev, curr, period, elapsed, slack)
end
