-- ratelimit/common.lua: helpers shared by the rate-limit algorithms. Concatenated, with one
-- file per algorithm, in front of ratelimit.lua (which states the script's contract), so
-- every `local` here is visible to the files after it.
--
-- Every time is an integer number of microseconds held in a Lua number (a double): all of
-- them stay below 2^53, so they are exact. Each algorithm file defines one function
--
--   decide(key, now, cost, need, a, b, keep) -> d
--
-- (`keep` is read by the sliding log only: how long it outlives its newest entry)
--
-- that only READS its key (but for rewriting, in the same meaning, a state counted in another
-- unit when the subject's rate changed) and returns a table d:
--   d.allowed      true if this policy allows `need` units now
--   d.retry        µs until it would (0 when allowed)
--   d.remaining    cost-1 requests left if nothing is applied: also the largest cost that
--                  passes now (ratelimit.lua's up-to relies on it)
--   d.reset        µs until the policy is back to full if nothing is applied
--   d.apply        when allowed with cost > 0: function(slack_ms) that writes the new state
--                  (with a ttl of its reset time plus slack_ms); nil otherwise
--   d.after_remaining, d.after_reset   the figures once applied
-- `cost` is what is consumed (0 for a peek); `need` is max(cost, 1), what must fit.

-- floor(x / y) for integers x >= 0, y > 0, exact below 2^53 (a double division can round
-- up to the next integer when the quotient is huge).
local function idiv(x, y)
  local q = math.floor(x / y)
  if q * y > x then
    q = q - 1
  elseif (q + 1) * y <= x then
    q = q + 1
  end
  return q
end

-- An integer as a string without exponent (tostring would print 1.7e+15).
local function int_str(x)
  return string.format('%.0f', x)
end

-- A ttl in whole milliseconds for PEXPIRE/PX: rounded up, at least 1, plus the slack. As
-- text: Redis turns a Lua number argument into text with printf's %.17g, which costs the
-- server ~2 µs per call more than formatting the integer here.
local function ttl_ms(us, slack)
  local ms = math.ceil(us / 1000)
  if ms < 1 then
    ms = 1
  end
  return string.format('%d', ms + slack)
end

local function non_negative(x)
  if x < 0 then
    return 0
  end
  return x
end
