-- Appends an entry to a log, if the caller's fence is at least the highest one the log has
-- seen: a job run or report from a holder whose lease expired cannot land after a newer one.
--
-- KEYS[1]  the log's highest fence
-- KEYS[2]  the log (a list, oldest first)
-- ARGV     fence, entry, how many entries to keep
--
-- Replies {status, fence}: {'ok', ARGV[1]} appended; {'stale', stored} refused.
local stored = tonumber(redis.call('GET', KEYS[1]) or '0')
local fence = tonumber(ARGV[1])
if fence < stored then
  return {'stale', stored}
end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('RPUSH', KEYS[2], ARGV[2])
redis.call('LTRIM', KEYS[2], -tonumber(ARGV[3]), -1)
return {'ok', fence}
