-- ratelimit/gcra.lua: GCRA (leaky bucket as a meter), the model of redis-cell's CL.THROTTLE.
-- Mirrors src/store/memory/ratelimit/gcra.rs.
--
-- gcra_core(key, now, cost, need, interval, burst) holds the arithmetic, once: it reads the
-- key and returns, without building a table,
--   allowed, remaining, retry, reset, new_tat
-- where remaining and reset are the figures if nothing is applied, and new_tat is the TAT to
-- write when allowed with cost > 0 (nil otherwise). gcra() wraps it in the decision table of
-- common.lua for checks of several policies; ratelimit.lua's fast path for a lone GCRA policy
-- calls gcra_core itself.
--
-- key      string: the theoretical arrival time (TAT) in µs; absent = no debt
-- interval the emission interval T in µs (period / count, rounded up)
-- burst    how many may go at once; the tolerance is burst * T
local function gcra_core(key, now, cost, need, interval, burst)
  local tolerance = interval * burst
  local tat = tonumber(redis.call('GET', key) or '0') or 0
  if tat < now then
    tat = now
  end
  local remaining = idiv(non_negative(tolerance - (tat - now)), interval)
  local allow_at = tat + need * interval - tolerance
  if allow_at > now then
    return false, remaining, allow_at - now, tat - now, nil
  end
  if cost > 0 then
    return true, remaining, 0, tat - now, tat + cost * interval
  end
  return true, remaining, 0, tat - now, nil
end

-- The figures once `new_tat` is written.
local function gcra_after(new_tat, now, interval, burst)
  return idiv(non_negative(interval * burst - (new_tat - now)), interval), new_tat - now
end

-- Writes the new TAT with a ttl of its reset time plus `slack` ms.
local function gcra_write(key, new_tat, now, slack)
  redis.call('SET', key, int_str(new_tat), 'PX', ttl_ms(new_tat - now, slack))
end

local function gcra(key, now, cost, need, interval, burst)
  local allowed, remaining, retry, reset, new_tat = gcra_core(key, now, cost, need, interval, burst)
  local d = { allowed = allowed, remaining = remaining, retry = retry, reset = reset }
  if new_tat then
    d.after_remaining, d.after_reset = gcra_after(new_tat, now, interval, burst)
    d.apply = function(slack)
      gcra_write(key, new_tat, now, slack)
    end
  end
  return d
end
