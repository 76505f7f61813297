-- ratelimit/gcra_checks.lua: the hot path of rate limiting: checks of subjects under ONE
-- policy of the GCRA family each (GCRA or token bucket, the same state), many per call. It
-- decides exactly as ratelimit.lua's check does with gcra.lua (same state "<tat>:<interval>",
-- same rewrite after a change of rate, same ttl), but answers one integer per check and
-- leaves the arithmetic of the figures to the client, and it defines no functions: the
-- general script creates some forty closures on every call (about 7 µs of server time),
-- this one none. Runs after a clock file (ratelimit/clock.lua), which defines `now`,
-- `slack` and `arg`, and gcra_debt.lua.
--
-- KEYS   one key per check
-- ARGV   from `arg` on, one per check: "<cost>:<interval µs>:<burst>" (a batch usually repeats
--        one text, which is parsed once)
-- Reply  an array with one integer per check: r >= 0 if the check is allowed, -r - 1 if it is
--        refused, where r is the µs until the policy is back to full (after consuming, when an
--        allowed check with cost > 0 consumed). The client derives the rest exactly as
--        gcra.lua does: remaining = floor(max(0, interval * burst - r) / interval), and for a
--        refused check retry = r + max(cost, 1) * interval - interval * burst.

-- MAX_DEBT comes from gcra_debt.lua, in front of this file.
local reply = {}
local last, cost, interval, interval_text, tolerance, need
for i = 1, #KEYS do
  local params = ARGV[arg]
  arg = arg + 1
  if params ~= last then
    local c, t, b = string.match(params, '^(%d+):(%d+):(%d+)$')
    cost, interval, interval_text = tonumber(c), tonumber(t), t
    tolerance = interval * tonumber(b)
    need = cost
    if need < 1 then
      need = 1
    end
    last = params
  end
  local key = KEYS[i]
  -- The TAT as of now (at least now), in the current interval: gcra_tat().
  local tat = now
  local stored = redis.call('GET', key)
  if stored then
    local s, was = string.match(stored, '^(%d+):(%d+)$')
    if s then
      s = tonumber(s)
      if s > now then
        if was == interval_text then
          local debt = s - now
          if debt > MAX_DEBT then
            debt = MAX_DEBT
          end
          tat = now + debt
        else
          was = tonumber(was)
          if was >= 1 then
            local debt = math.ceil((s - now) * interval / was)
            if debt > MAX_DEBT then
              debt = MAX_DEBT
            end
            tat = now + debt
            redis.call('SET', key, string.format('%d', tat) .. ':' .. interval_text, 'PX',
              string.format('%d', math.ceil(debt / 1000) + slack))
          end
        end
      end
    end
  end
  -- gcra_core() and gcra_write().
  if tat + need * interval - tolerance > now then
    reply[i] = now - tat - 1
  elseif cost > 0 then
    local new_tat = tat + cost * interval
    -- The ttl as text: see ttl_ms in common.lua.
    redis.call('SET', key, string.format('%d', new_tat) .. ':' .. interval_text, 'PX',
      string.format('%d', math.ceil((new_tat - now) / 1000) + slack))
    reply[i] = new_tat - now
  else
    reply[i] = tat - now
  end
end
return reply
