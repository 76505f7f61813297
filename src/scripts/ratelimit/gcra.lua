-- ratelimit/gcra.lua: GCRA (leaky bucket as a meter), the model of redis-cell's CL.THROTTLE.
-- Mirrors src/ratelimit/algorithm/gcra.rs; ratelimit.lua inlines it for a check of one GCRA
-- policy, so change both together.
--
-- gcra(key, now, cost, need, interval, burst) with the contract of common.lua.
-- key      string: the theoretical arrival time (TAT) in µs; absent = no debt
-- interval the emission interval T in µs (period / count, rounded up)
-- burst    how many may go at once; the tolerance is burst * T
local function gcra(key, now, cost, need, interval, burst)
  local tolerance = interval * burst
  local tat = tonumber(redis.call('GET', key) or '0') or 0
  if tat < now then
    tat = now
  end
  local d = {
    remaining = idiv(non_negative(tolerance - (tat - now)), interval),
    reset = tat - now,
    retry = 0,
  }
  local allow_at = tat + need * interval - tolerance
  if allow_at > now then
    d.allowed = false
    d.retry = allow_at - now
    return d
  end
  d.allowed = true
  if cost > 0 then
    local new_tat = tat + cost * interval
    d.after_remaining = idiv(non_negative(tolerance - (new_tat - now)), interval)
    d.after_reset = new_tat - now
    d.apply = function(slack)
      redis.call('SET', key, int_str(new_tat), 'PX', ttl_ms(new_tat - now, slack))
    end
  end
  return d
end
