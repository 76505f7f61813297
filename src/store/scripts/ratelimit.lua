-- ratelimit.lua: one or more rate-limit checks, each over one or more policies of one
-- subject, each all or nothing. Concurrent checks of one client share one call (see
-- src/store/batch.rs). Runs after ratelimit/common.lua, the five algorithm files, which
-- define the functions dispatched to below (see common.lua for their contract), and a clock
-- file (ratelimit/clock.lua: the server's TIME), which defines `now`, `slack` and `arg`.
--
-- For each check in order:
--   ARGV       cost: units to consume (>= 0; 0 peeks: decides for a cost of 1, writes
--              nothing), n: the number of policies, then for each policy its algorithm (1 gcra,
--              2 token bucket, 3 fixed window, 4 sliding window, 5 sliding log) and its two
--              parameters: interval µs and burst for 1-2, period µs and limit for 3-5
--   KEYS       n keys, one per policy; all share the subject's hash tag
--
-- Reply, for each check in order, one text of integers separated by spaces (a bare text
-- when there is one check, an array of them otherwise; one text parses much faster than an
-- array of integers): applied, then allowed_i, remaining_i, retry_i, reset_i for each of its
-- policies:
--   applied      1 if every policy allowed and cost > 0, so every policy consumed `cost`;
--                0 otherwise, and then nothing was written for this check
--   allowed_i    1 if policy i alone allows the request
--   remaining_i  cost-1 requests left under policy i (after consuming, if applied)
--   retry_i      µs until policy i would allow the request (0 if it does)
--   reset_i      µs until policy i is back to full (after consuming, if applied)
--
-- Phase one asks every policy of a check to decide without writing; phase two, only if all
-- allowed, applies every policy's write. Each write sets a ttl of the state's reset time, so
-- no key outlives the moment it stops mattering. Checks run one after another, so a later
-- check in one call sees the writes of an earlier one.
local algorithms = { gcra, token_bucket, fixed_window, sliding_window, sliding_log }
local key = 1

-- One check of n policies, read from ARGV[arg..] and KEYS[key..] (both advanced): its reply.
local function check(cost, need, n)
  local decisions = {}
  local all_allowed = true
  for i = 1, n do
    local decide = algorithms[tonumber(ARGV[arg])]
    local d = decide(KEYS[key], now, cost, need, tonumber(ARGV[arg + 1]), tonumber(ARGV[arg + 2]))
    decisions[i] = d
    all_allowed = all_allowed and d.allowed
    arg = arg + 3
    key = key + 1
  end

  local applied = all_allowed and cost > 0
  local text = '0'
  if applied then
    text = '1'
  end
  for i = 1, n do
    local d = decisions[i]
    local allowed, remaining, reset = 0, d.remaining, d.reset
    if d.allowed then
      allowed = 1
    end
    if applied then
      d.apply(slack)
      remaining, reset = d.after_remaining, d.after_reset
    end
    -- %d prints the whole number exactly (every value here is an integer below 2^53).
    text = text .. string.format(' %d %d %d %d', allowed, remaining, d.retry, reset)
  end
  return text
end

local reply = {}
while arg <= #ARGV do
  local cost = tonumber(ARGV[arg])
  local n = tonumber(ARGV[arg + 1])
  arg = arg + 2
  local need = cost
  if need < 1 then
    need = 1
  end
  if n == 1 and ARGV[arg] == '1' then
    -- One GCRA policy, the most common check: gcra_core() straight, without the decision
    -- table and closure of check() (an eighth of the script's server time on this path).
    local interval, burst = tonumber(ARGV[arg + 1]), tonumber(ARGV[arg + 2])
    local k = KEYS[key]
    arg = arg + 3
    key = key + 1
    local allowed, remaining, retry, reset, new_tat = gcra_core(k, now, cost, need, interval, burst)
    local text
    if not allowed then
      text = string.format('0 0 %d %d %d', remaining, retry, reset)
    elseif new_tat then
      gcra_write(k, new_tat, now, slack)
      remaining, reset = gcra_after(new_tat, now, interval, burst)
      text = string.format('1 1 %d 0 %d', remaining, reset)
    else
      text = string.format('0 1 %d 0 %d', remaining, reset)
    end
    reply[#reply + 1] = text
  else
    reply[#reply + 1] = check(cost, need, n)
  end
end
if #reply == 1 then
  return reply[1]
end
return reply
