-- ratelimit/gcra.lua: GCRA (leaky bucket as a meter), the model of redis-cell's CL.THROTTLE,
-- and the token bucket, which is the same algorithm counted in whole tokens (its figures are
-- GCRA's to the microsecond, so it keeps the same state; algorithm 2 dispatches here too).
-- Mirrors src/store/ratelimit/gcra.rs.
--
-- key      string "<tat>:<interval>": the theoretical arrival time (TAT) in µs, and the
--          emission interval it was counted in; absent = no debt
-- interval the emission interval T in µs (period / count, rounded up)
-- burst    how many may go at once; the tolerance is burst * T
--
-- A TAT counted in another interval (the subject's rate changed) is read as the same number
-- of intervals of debt in the current one, rounded up, and rewritten so by the first
-- operation under the new rate (a peek too): what the subject used carries over, a change of
-- rate never hands out a burst, and from then on the debt drains at the new rate, as every
-- figure answered assumes. Beyond the tolerance, the TAT holds reservations (reserve in
-- ratelimit.lua): requests that were told to wait their turn.

-- MAX_DEBT comes from gcra_debt.lua, in front of this file.

-- Writes the new TAT (or deletes the key when there is no debt left) with a ttl of its reset
-- time plus `slack` ms.
local function gcra_write(key, new_tat, now, interval, slack)
  if new_tat <= now then
    redis.call('DEL', key)
    return
  end
  redis.call('SET', key, int_str(new_tat) .. ':' .. int_str(interval), 'PX',
    ttl_ms(new_tat - now, slack))
end

-- The TAT of `key` as of `now` (at least `now`), in the current interval.
local function gcra_tat(key, now, interval)
  local stored = redis.call('GET', key)
  if not stored then
    return now
  end
  local tat, was = string.match(stored, '^(%d+):(%d+)$')
  if not tat then
    return now
  end
  tat, was = tonumber(tat), tonumber(was)
  if tat <= now or was < 1 then
    return now
  end
  local debt = tat - now
  if was ~= interval then
    -- The same double expression, in the same order, as gcra.rs, so both stores agree.
    debt = math.ceil(debt * interval / was)
  end
  if debt > MAX_DEBT then
    debt = MAX_DEBT
  end
  if was ~= interval then
    -- Kept in the current interval from now on (the same debt, in new units): read again in
    -- the old one, it would drain at the old rate, not the one every figure assumes.
    gcra_write(key, now + debt, now, interval, slack)
  end
  return now + debt
end

-- gcra_core(key, now, cost, need, interval, burst) holds the arithmetic, once: it reads the
-- key and returns, without building a table,
--   allowed, remaining, retry, reset, new_tat
-- where remaining and reset are the figures if nothing is applied, and new_tat is the TAT to
-- write when allowed with cost > 0 (nil otherwise). gcra() wraps it in the decision table of
-- common.lua for checks of several policies; ratelimit.lua's fast path for a lone GCRA policy
-- calls gcra_core itself.
local function gcra_core(key, now, cost, need, interval, burst)
  local tolerance = interval * burst
  local tat = gcra_tat(key, now, interval)
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

local function gcra(key, now, cost, need, interval, burst)
  local allowed, remaining, retry, reset, new_tat = gcra_core(key, now, cost, need, interval, burst)
  local d = { allowed = allowed, remaining = remaining, retry = retry, reset = reset }
  if new_tat then
    d.after_remaining, d.after_reset = gcra_after(new_tat, now, interval, burst)
    d.apply = function(slack)
      gcra_write(key, new_tat, now, interval, slack)
    end
  end
  return d
end

-- Gives back (delta < 0) or charges (delta > 0) |delta| units. A charge never takes the TAT
-- past `now + tolerance` (a subject is never put into debt beyond an empty bucket, so no
-- penalty makes it wait longer than the reset time) and never lowers it; a refund never
-- takes it below `now` (never fuller than full).
local function gcra_adjust(key, now, delta, interval, burst, slack)
  local tat = gcra_tat(key, now, interval)
  local new_tat = tat + delta * interval
  if delta < 0 then
    if new_tat < now then
      new_tat = now
    end
  else
    local cap = now + interval * burst
    if new_tat > cap then
      new_tat = cap
    end
    if new_tat < tat then
      new_tat = tat
    end
  end
  gcra_write(key, new_tat, now, interval, slack)
end
