-- ratelimit/fixed_window.lua: a fixed window counter. Mirrors
-- src/store/ratelimit/fixed_window.rs.
--
-- fixed_window(key, now, cost, need, period, limit) with the contract of common.lua.
-- key      string "<index>:<count>:<period>": the window (now / period, epoch-aligned), its
--          count, and the period it was counted in
-- period   the window length in µs
-- limit    how many per window
--
-- A count made under another period (the subject's rate changed) carries over into the
-- current window as long as its own window has not ended (rewritten so when first read).

-- The current window's index and count.
local function fixed_window_count(key, now, period)
  local index = idiv(now, period)
  local stored = redis.call('GET', key)
  if stored then
    local i, c, p = string.match(stored, '^(%d+):(%d+):(%d+)$')
    if i then
      i, c, p = tonumber(i), tonumber(c), tonumber(p)
      if p == period then
        if i == index then
          return index, c
        end
      elseif p > 0 and now < (i + 1) * p then
        -- Counted in the current window from now on (rewritten once).
        redis.call('SET', key, int_str(index) .. ':' .. int_str(c) .. ':' .. int_str(period),
          'PX', ttl_ms((index + 1) * period - now, slack))
        return index, c
      end
    end
  end
  return index, 0
end

-- Writes the count (or deletes the key at zero) until the window ends, plus `slack` ms.
local function fixed_window_write(key, index, count, period, window_end, slack)
  if count <= 0 then
    redis.call('DEL', key)
    return
  end
  redis.call('SET', key, int_str(index) .. ':' .. int_str(count) .. ':' .. int_str(period), 'PX',
    ttl_ms(window_end, slack))
end

local function fixed_window(key, now, cost, need, period, limit)
  local index, count = fixed_window_count(key, now, period)
  local window_end = (index + 1) * period - now
  local function reset(c)
    if c > 0 then
      return window_end
    end
    return 0
  end
  local d = { remaining = non_negative(limit - count), reset = reset(count), retry = 0 }
  if count + need > limit then
    d.allowed = false
    d.retry = window_end
    return d
  end
  d.allowed = true
  if cost > 0 then
    local new_count = count + cost
    d.after_remaining = non_negative(limit - new_count)
    d.after_reset = reset(new_count)
    d.apply = function(slack)
      fixed_window_write(key, index, new_count, period, window_end, slack)
    end
  end
  return d
end

-- Gives back (delta < 0) or charges (delta > 0) |delta| units of this window: a refund stops
-- at zero, a charge at the limit (and never lowers a count already above it).
local function fixed_window_adjust(key, now, delta, period, limit, slack)
  local index, count = fixed_window_count(key, now, period)
  local new_count = count + delta
  if delta < 0 then
    new_count = non_negative(new_count)
  else
    if new_count > limit then
      new_count = limit
    end
    if new_count < count then
      new_count = count
    end
  end
  fixed_window_write(key, index, new_count, period, (index + 1) * period - now, slack)
end
