-- ratelimit/clock.lua: the production clock of ratelimit.lua: the server's, read once per
-- call. (With the `test-util` feature only, a separate script text takes the time from the
-- caller instead: see src/store/ratelimit/script.rs.) Defines `now` (µs since the epoch),
-- `slack` (ms added to every ttl: none here) and `arg`, the first ARGV of the checks.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local slack = 0
local arg = 1
