-- ratelimit.lua: one rate-limit check over one or more policies of one subject, all or
-- nothing. Runs after ratelimit/common.lua and the five algorithm files, which define the
-- functions dispatched to below (see common.lua for their contract).
--
-- KEYS[1..n]   one key per policy; all share the subject's hash tag
-- ARGV[1]      '' to read the clock with TIME (always, in production); otherwise a time in
--              µs since the epoch to decide at instead (tests only: then every ttl gets an
--              hour of slack, since the server expires keys on its own clock)
-- ARGV[2]      cost: units to consume (>= 0). 0 peeks: decides for a cost of 1, writes nothing
-- ARGV[3i..3i+2] for policy i (1-based): algorithm (1 gcra, 2 token bucket, 3 fixed
--              window, 4 sliding window, 5 sliding log), then its two parameters:
--              interval µs and burst for 1-2, period µs and limit for 3-5
--
-- Reply {applied, allowed_1, remaining_1, retry_1, reset_1, ..., allowed_n, ...}
--   applied      1 if every policy allowed and cost > 0, so every policy consumed `cost`;
--                0 otherwise, and then nothing was written at all
--   allowed_i    1 if policy i alone allows the request
--   remaining_i  cost-1 requests left under policy i (after consuming, if applied)
--   retry_i      µs until policy i would allow the request (0 if it does)
--   reset_i      µs until policy i is back to full (after consuming, if applied)
--
-- Phase one asks every policy to decide without writing; phase two, only if all allowed,
-- applies every policy's write. Each write sets a ttl of the state's reset time, so no key
-- outlives the moment it stops mattering.
local now
local slack = 0
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[1])
  slack = 3600000
end
local cost = tonumber(ARGV[2])
local need = cost
if need < 1 then
  need = 1
end

local algorithms = { gcra, token_bucket, fixed_window, sliding_window, sliding_log }
local decisions = {}
local all_allowed = true
for i = 1, #KEYS do
  local base = 3 * i
  local decide = algorithms[tonumber(ARGV[base])]
  local d = decide(KEYS[i], now, cost, need, tonumber(ARGV[base + 1]), tonumber(ARGV[base + 2]))
  decisions[i] = d
  all_allowed = all_allowed and d.allowed
end

local applied = all_allowed and cost > 0
local reply = { 0 }
if applied then
  reply[1] = 1
end
for i = 1, #KEYS do
  local d = decisions[i]
  local allowed, remaining, reset = 0, d.remaining, d.reset
  if d.allowed then
    allowed = 1
  end
  if applied then
    d.apply(slack)
    remaining, reset = d.after_remaining, d.after_reset
  end
  reply[#reply + 1] = allowed
  reply[#reply + 1] = remaining
  reply[#reply + 1] = d.retry
  reply[#reply + 1] = reset
end
return reply
