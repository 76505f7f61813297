-- ratelimit.lua: one or more rate-limit operations, each over one or more policies of one
-- subject, each all or nothing. Concurrent operations of one client share one call (see
-- src/store/batch.rs). Runs after a clock file (ratelimit/clock.lua: the server's TIME),
-- which defines `now`, `slack` and `arg`, then ratelimit/common.lua, the algorithm files and
-- ratelimit/lockout.lua, which define the functions dispatched to below (see common.lua for
-- their contract).
--
-- For each operation in order:
--   ARGV       op, amount, extra, n: the number of policies, then for each policy (STRIDE
--              values) its algorithm (1 gcra, 2 token bucket, 3 fixed window, 4 sliding
--              window, 5 sliding log), its two parameters (interval µs and burst for 1-2,
--              period µs and limit for 3-5), keep: how long a sliding log outlives its newest
--              entry, µs, at least its period (0, unread, for the others), and its lockout:
--              '0' for none, else the spec of lockout.lua. The ops:
--                0 check     consume `amount` units if every policy allows (0 peeks: decides
--                            for a cost of 1, writes nothing)
--                1 reserve   as a check, but when every policy is of the GCRA family (1-2)
--                            without a lockout and the request would pass within `extra` µs,
--                            consume it now at the moment it will pass (its place in the
--                            queue) and answer the wait; any other policy makes it a check
--                2 refund    give back `amount` units (never fuller than full)
--                3 penalize  charge `amount` units (never beyond empty)
--                4 reset     delete every policy's state, and its lock
--                5 up to     consume as many units as every policy allows now, at most
--                            `amount` (>= 1): the least of the policies' `remaining`, which
--                            is the largest cost each passes now; a check of that many (a
--                            peek when it is 0, but an attempt: see below)
--                6 any of    each policy decides `amount` units in order, writing nothing;
--                            the first that allows consumes them, alone (0 peeks: nothing
--                            is written); if none allows, nothing is written
--              refund, penalize and reset then answer as a peek.
--   KEYS       per policy its key, then its lock's key when it has a lockout; all share the
--              subject's hash tag
--
-- Lockouts: a policy whose subject is blocked decides as masked by lockout.lua (denied,
-- nothing left). When a check or reservation of cost > 0, an up-to that fits nothing, or an
-- any-of of cost > 0 that no policy allows, is not applied, every lockout policy that denied
-- while its subject was not blocked is breached: the subject is blocked from now, and the
-- policy answers so.
--
-- Reply, for each operation in order, one text of integers separated by spaces (a bare text
-- when there is one, an array of them otherwise; one text parses much faster than an array
-- of integers): applied, wait, then allowed_i, remaining_i, retry_i, reset_i, locked_i per
-- policy:
--   applied      1 if a check or reservation consumed (every policy allowed and cost > 0),
--                or an any-of did (one policy allowed and cost > 0); 0 otherwise, and then
--                a check, reservation or any-of wrote nothing
--   wait         µs until a reservation's turn (for one refused, the turn it would have
--                had); for an up-to, the units it consumed; for an any-of, the number
--                (from 1) of the policy it charged, 0 for none; 0 for every other op
--   allowed_i    1 if policy i alone allows the request
--   remaining_i  cost-1 requests left under policy i (after consuming, if applied to it)
--   retry_i      µs until policy i would allow the request (0 if it does)
--   reset_i      µs until policy i is back to full (after consuming, if applied to it)
--   locked_i     µs until the subject's block under policy i's lockout ends (0: not blocked)
--
-- A check asks every policy to decide without writing, then, only if all allowed, applies
-- every policy's write. Each write sets a ttl of the state's reset time, so no key outlives
-- the moment it stops mattering. Operations run one after another, so a later one in one call
-- sees the writes of an earlier one.
local algorithms = { gcra, gcra, fixed_window, sliding_window, sliding_log }
local adjusters = { gcra_adjust, gcra_adjust, fixed_window_adjust, sliding_window_adjust,
  sliding_log_adjust }
local key = 1
-- ARGV values per policy.
local STRIDE = 5

-- Decides the policy at ARGV[arg..] and KEYS[key..] (both advanced past it), masked by its
-- lock while the subject is blocked: the decision of common.lua, with `locked` (µs of block
-- left, 0: none) and, for a lockout policy, its lock's key, spec and remembered breaches.
local function decide_policy(cost, need)
  local decide = algorithms[tonumber(ARGV[arg])]
  local d = decide(KEYS[key], now, cost, need, tonumber(ARGV[arg + 1]), tonumber(ARGV[arg + 2]),
    tonumber(ARGV[arg + 3]))
  local spec = ARGV[arg + 4]
  arg = arg + STRIDE
  key = key + 1
  d.locked = 0
  if spec ~= '0' then
    d.lock_key, d.lockout = KEYS[key], spec
    key = key + 1
    local ends, breaches = lockout_read(d.lock_key, now, spec)
    d.breaches = breaches
    if ends > now then
      lockout_mask(d, ends - now)
    end
  end
  return d
end

-- `text` with decision d's five figures appended: first breaching its lockout when `breach`
-- and it denied while not blocked, then applying its write when `charged` (its figures are
-- then those after the charge, else those before).
local function answer(text, d, breach, charged)
  if d.lockout and breach and not d.allowed and d.locked == 0 then
    lockout_breach(d, now, slack)
  end
  local allowed, remaining, reset = 0, d.remaining, d.reset
  if d.allowed then
    allowed = 1
  end
  if charged then
    d.apply(slack)
    remaining, reset = d.after_remaining, d.after_reset
  end
  -- %d prints the whole number exactly (every value here is an integer below 2^53).
  return text .. string.format(' %d %d %d %d %d', allowed, remaining, d.retry, reset, d.locked)
end

-- One check of n policies, read from ARGV[arg..] and KEYS[key..] (both advanced): its reply,
-- with `second` (or 0) as its second number. If it is not applied and it is an `attempt`,
-- every lockout policy that denied while not blocked is breached.
local function check(cost, need, n, second, attempt)
  local decisions = {}
  local all_allowed = true
  for i = 1, n do
    local d = decide_policy(cost, need)
    decisions[i] = d
    all_allowed = all_allowed and d.allowed
  end

  local applied = all_allowed and cost > 0
  local text = '0 ' .. int_str(second or 0)
  if applied then
    text = '1 ' .. int_str(second or 0)
  end
  for i = 1, n do
    text = answer(text, decisions[i], attempt and not applied, applied)
  end
  return text
end

-- Any of n policies, read from ARGV[arg..] and KEYS[key..] (both advanced): each decides
-- in order without writing; the first that allows consumes `cost` (when above 0), alone, and
-- answers its figures after, the others their figures before. The reply's second number is
-- the charged policy's number (from 1), 0 for none. When a cost above 0 finds no policy
-- that allows, every lockout policy that denied while not blocked is breached.
local function any_of(cost, need, n)
  local decisions = {}
  local first = 0
  for i = 1, n do
    local d = decide_policy(cost, need)
    decisions[i] = d
    if first == 0 and d.allowed then
      first = i
    end
  end
  local charged = 0
  if cost > 0 then
    charged = first
  end
  local attempt = cost > 0 and first == 0
  local text = '0 0'
  if charged > 0 then
    text = '1 ' .. int_str(charged)
  end
  for i = 1, n do
    text = answer(text, decisions[i], attempt, i == charged)
  end
  return text
end

-- Whether the n policies from ARGV[arg..] are all of the GCRA family, without a lockout.
local function reservable(n)
  for i = 0, n - 1 do
    local algorithm = ARGV[arg + STRIDE * i]
    if (algorithm ~= '1' and algorithm ~= '2') or ARGV[arg + STRIDE * i + 4] ~= '0' then
      return false
    end
  end
  return true
end

-- One reservation of n GCRA-family policies without lockouts (one key each): the request
-- passes at the first moment every policy allows it; if that is within max_wait µs, every
-- policy consumes it at that moment.
local function reserve(cost, need, max_wait, n)
  local tats, allow_at = {}, now
  for i = 1, n do
    local at_arg = arg + STRIDE * (i - 1)
    local interval, burst = tonumber(ARGV[at_arg + 1]), tonumber(ARGV[at_arg + 2])
    local tat = gcra_tat(KEYS[key + i - 1], now, interval)
    tats[i] = tat
    local at = tat + need * interval - interval * burst
    if at > allow_at then
      allow_at = at
    end
  end
  local wait = allow_at - now
  local granted = wait <= max_wait
  local text
  if granted then
    text = '1 ' .. int_str(wait)
  else
    text = '0 ' .. int_str(wait)
  end
  for i = 1, n do
    local interval, burst = tonumber(ARGV[arg + 1]), tonumber(ARGV[arg + 2])
    local k, tat = KEYS[key], tats[i]
    local tolerance = interval * burst
    if granted then
      local start = tat
      if allow_at > start then
        start = allow_at
      end
      local new_tat = start + cost * interval
      gcra_write(k, new_tat, now, interval, slack)
      local remaining, reset = gcra_after(new_tat, now, interval, burst)
      text = text .. string.format(' 1 %d 0 %d 0', remaining, reset)
    else
      local remaining = idiv(non_negative(tolerance - (tat - now)), interval)
      local retry = non_negative(tat + need * interval - tolerance - now)
      local allowed = 0
      if retry == 0 then
        allowed = 1
      end
      text = text .. string.format(' %d %d %d %d 0', allowed, remaining, retry, tat - now)
    end
    arg = arg + STRIDE
    key = key + 1
  end
  return text
end

-- Refund (sign -1), penalize (sign 1) or reset (sign 0) n policies, then peek. A reset
-- deletes a policy's lock too; a refund or a penalty leaves it.
local function adjust(sign, amount, n)
  local first_arg, first_key = arg, key
  for _ = 1, n do
    local k = KEYS[key]
    local locked = ARGV[arg + 4] ~= '0'
    if sign == 0 then
      redis.call('DEL', k)
      if locked then
        redis.call('DEL', KEYS[key + 1])
      end
    elseif amount > 0 then
      local adjuster = adjusters[tonumber(ARGV[arg])]
      adjuster(k, now, sign * amount, tonumber(ARGV[arg + 1]), tonumber(ARGV[arg + 2]), slack,
        tonumber(ARGV[arg + 3]))
    end
    arg = arg + STRIDE
    key = key + 1
    if locked then
      key = key + 1
    end
  end
  arg, key = first_arg, first_key
  return check(0, 1, n, nil, false)
end

-- As many units as every one of n policies allows now, at most `most` (>= 1), consumed in
-- one check; the reply's second number is how many. Each policy's `remaining` for a peek is
-- the largest cost it passes now (every algorithm's figures are readings of that; 0 while
-- the subject is blocked), so the least of them all pass together, and one more would not.
-- Fitting nothing is an attempt that failed: lockout policies that denied are breached.
local function up_to(most, n)
  local first_arg, first_key = arg, key
  for _ = 1, n do
    local d = decide_policy(0, 1)
    if d.remaining < most then
      most = d.remaining
    end
  end
  arg, key = first_arg, first_key
  if most < 1 then
    return check(0, 1, n, 0, true)
  end
  return check(most, most, n, most, true)
end

local reply = {}
while arg <= #ARGV do
  local op = tonumber(ARGV[arg])
  local amount = tonumber(ARGV[arg + 1])
  local extra = tonumber(ARGV[arg + 2])
  local n = tonumber(ARGV[arg + 3])
  arg = arg + 4
  local need = amount
  if need < 1 then
    need = 1
  end
  local text
  if op == 0 and n == 1 and ARGV[arg] == '1' and ARGV[arg + 4] == '0' then
    -- One GCRA policy checked, the most common operation: gcra_core() straight, without the
    -- decision table and closure of check() (an eighth of the script's server time here).
    local interval, burst = tonumber(ARGV[arg + 1]), tonumber(ARGV[arg + 2])
    local k = KEYS[key]
    arg = arg + STRIDE
    key = key + 1
    local allowed, remaining, retry, reset, new_tat = gcra_core(k, now, amount, need, interval, burst)
    if not allowed then
      text = string.format('0 0 0 %d %d %d 0', remaining, retry, reset)
    elseif new_tat then
      gcra_write(k, new_tat, now, interval, slack)
      remaining, reset = gcra_after(new_tat, now, interval, burst)
      text = string.format('1 0 1 %d 0 %d 0', remaining, reset)
    else
      text = string.format('0 0 1 %d 0 %d 0', remaining, reset)
    end
  elseif op == 0 then
    text = check(amount, need, n, nil, amount > 0)
  elseif op == 1 then
    if amount > 0 and reservable(n) then
      text = reserve(amount, need, extra, n)
    else
      text = check(amount, need, n, nil, amount > 0)
    end
  elseif op == 2 then
    text = adjust(-1, amount, n)
  elseif op == 3 then
    text = adjust(1, amount, n)
  elseif op == 5 then
    text = up_to(amount, n)
  elseif op == 6 then
    text = any_of(amount, need, n)
  else
    text = adjust(0, 0, n)
  end
  reply[#reply + 1] = text
end
if #reply == 1 then
  return reply[1]
end
return reply
