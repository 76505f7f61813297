-- ratelimit/fixed_window.lua: a fixed window counter. Mirrors
-- src/ratelimit/algorithm/fixed_window.rs.
--
-- fixed_window(key, now, cost, need, period, limit) with the contract of common.lua.
-- key      string "<index>:<count>": the window (now / period, epoch-aligned) and its count
-- period   the window length in µs
-- limit    how many per window
local function fixed_window(key, now, cost, need, period, limit)
  local index = idiv(now, period)
  local count = 0
  local stored = redis.call('GET', key)
  if stored then
    local i, c = string.match(stored, '^(%d+):(%d+)$')
    if i and tonumber(i) == index then
      count = tonumber(c)
    end
  end
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
      redis.call('SET', key, int_str(index) .. ':' .. int_str(new_count), 'PX',
        ttl_ms(window_end, slack))
    end
  end
  return d
end
