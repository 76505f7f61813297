-- ratelimit/gcra_debt.lua: concatenated in front of gcra.lua and gcra_checks.lua (and mirrored
-- by MAX_DEBT in src/store/ratelimit/gcra.rs).
-- The most debt a TAT may hold, in µs (four maximum periods: a full burst plus the longest
-- reservation), so every time stays an exact integer below 2^53.
local MAX_DEBT = 126489600000000
