-- ratelimit/token_bucket.lua: a token bucket. Mirrors src/ratelimit/algorithm/token_bucket.rs.
--
-- token_bucket(key, now, cost, need, interval, burst) with the contract of common.lua.
-- key      string "<tokens>:<at>": whole tokens left, counted at time <at> (µs); absent = full
-- interval µs per token (period / count, rounded up)
-- burst    the bucket's capacity
local function token_bucket(key, now, cost, need, interval, burst)
  local tokens, at = burst, now
  local stored = redis.call('GET', key)
  if stored then
    local t, a = string.match(stored, '^(%d+):(%d+)$')
    if t then
      tokens, at = tonumber(t), tonumber(a)
    end
  end
  if now > at then
    -- Whole tokens earned since `at`; `at` keeps the fraction of the next one.
    local gained = idiv(now - at, interval)
    tokens = tokens + gained
    at = at + gained * interval
  end
  if tokens >= burst then
    tokens = burst
    at = now
  end
  local function until_full(left)
    if left >= burst then
      return 0
    end
    return (burst - left) * interval - (now - at)
  end
  local d = { remaining = tokens, reset = until_full(tokens), retry = 0 }
  if tokens < need then
    d.allowed = false
    d.retry = (need - tokens) * interval - (now - at)
    return d
  end
  d.allowed = true
  if cost > 0 then
    local left = tokens - cost
    d.after_remaining = left
    d.after_reset = until_full(left)
    d.apply = function(slack)
      redis.call('SET', key, int_str(left) .. ':' .. int_str(at), 'PX',
        ttl_ms(d.after_reset, slack))
    end
  end
  return d
end
