-- boot.lua: put in front of acquire.lua (after fence.lua) for a node of a Redlock quorum. It
-- tells a node that lost its data (restarted without persistence, or flushed) from one that
-- kept it, so that the client can let it sit out of majorities until every grant it forgot
-- has expired (see src/store/quorum/mod.rs). Costs one GET per acquire; no round trip.
--
-- KEYS[#KEYS]   the node's boot key (taken off KEYS before acquire.lua reads them): a random
--               value and the server time (ms) it was seeded at, '<random>@<ms>'
-- ARGV[#ARGV]   a fresh random value, to seed the boot key if it is missing
-- ARGV[#ARGV-1] the boot value the client last saw on this node ('' if none yet)
--
-- If the boot key is missing, it is seeded with the fresh value and the server's time. If it
-- then differs from the value the client saw, nothing else runs and the reply is the error
-- 'DISTLOCK_RESTARTED <value> <now ms>': the client adopts <value> and sits the node out for
-- what is left of its quarantine since the seeding. Otherwise acquire.lua runs on the
-- remaining KEYS and ARGV.
local boot_key = table.remove(KEYS)
local fresh = table.remove(ARGV)
local seen = table.remove(ARGV)
local boot = redis.call('GET', boot_key)
if boot ~= seen then
  local t = redis.call('TIME')
  local now_ms = string.format('%.0f', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
  if boot == false then
    boot = fresh .. '@' .. now_ms
    redis.call('SET', boot_key, boot)
  end
  return redis.error_reply('DISTLOCK_RESTARTED ' .. boot .. ' ' .. now_ms)
end
