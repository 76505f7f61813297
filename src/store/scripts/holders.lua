-- holders.lua: helpers for holder sets. Concatenated in front of the scripts that touch one
-- (after fence.lua where both are needed), so its locals are visible to them.
--
-- A holder set is a sorted set with one entry per held permit, `<token>:<i>` for
-- i = 1..count, scored by the entry's expiry in milliseconds on the server's clock. An entry
-- whose score has passed is expired: every script removes those first (`prune`), so a holder
-- that died frees its permits within its ttl, and the set's own key expiry is kept at its
-- latest entry's (`stretch`), so an abandoned set disappears with its last entry.

-- The server clock in milliseconds.
local function clock_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Drops the expired entries of `set`.
local function prune(set, now)
  redis.call('ZREMRANGEBYSCORE', set, '-inf', now)
end

-- Keeps `set`'s key alive exactly as long as its latest entry.
local function stretch(set, now)
  local last = redis.call('ZRANGE', set, -1, -1, 'WITHSCORES')
  if last[2] then
    redis.call('PEXPIRE', set, string.format('%d', math.max(1, tonumber(last[2]) - now)))
  end
end

-- Sets the expiry of `count` entries of `token` to `expiry` (adding them if `mode` is nil,
-- only updating existing ones with 'XX'), a few hundred per call.
local function put_entries(set, token, count, expiry, mode)
  local i = 1
  while i <= count do
    local args = mode and { mode } or {}
    local last = math.min(count, i + 255)
    for j = i, last do
      args[#args + 1] = expiry
      args[#args + 1] = token .. ':' .. j
    end
    redis.call('ZADD', set, unpack(args))
    i = last + 1
  end
end

-- Removes `count` entries of `token`; returns how many there were.
local function remove_entries(set, token, count)
  local removed, i = 0, 1
  while i <= count do
    local args = {}
    local last = math.min(count, i + 255)
    for j = i, last do
      args[#args + 1] = token .. ':' .. j
    end
    removed = removed + redis.call('ZREM', set, unpack(args))
    i = last + 1
  end
  return removed
end

-- Whether `token` holds live entries in `set` (its first entry is there and not expired).
local function holds(set, token, now)
  local score = redis.call('ZSCORE', set, token .. ':1')
  return score ~= false and tonumber(score) > now
end
