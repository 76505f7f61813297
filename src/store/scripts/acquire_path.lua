-- acquire_path.lua (after fence.lua and holders.lua): take a hierarchical lock's path, top
-- down, all levels or none: the intention mode on every ancestor level and the requested mode
-- on the last one, each only if no live holder of the level is in an incompatible mode and no
-- other waiter's intent mark there is incompatible with it; then mint the grant's fence.
--
-- KEYS[6(i-1)+1 .. 6(i-1)+4]  level i's holder sets (see holders.lua), one per mode, IS, IX,
--                             S, X: a holder is one entry `<token>:1` in its mode's set
-- KEYS[6(i-1)+5]              level i's intent mark: `<mode 1-4><waiter>` of a waiter kept
--                             out by incompatible holders
-- KEYS[6(i-1)+6]              level i's waited mark: exists while a waiter listens for a
--                             release of the level's holders (release_path.lua publishes)
-- KEYS[6d+1]                  the fence key (fence.lua); d = (#KEYS - 1) / 6 levels
-- ARGV[1]  the new token (unguessable, unique per lease, never contains '\n')
-- ARGV[2]  ttl in milliseconds (> 0)
-- ARGV[3]  whether the caller waits for a release: '0' no; otherwise a busy reply also marks
--          the level it found busy as waited for, and as intended for when holders block it
-- ARGV[4]  the waiter: an id the caller keeps across its attempts (its tokens change)
-- ARGV[4+i]  the mode taken on level i: 1 IS, 2 IX, 3 S, 4 X
--
-- Reply  fence > 0      granted (also when the token already holds the path: a retry of a
--                       grant whose reply was lost; its ttl is reset)
--        -(wait + 1)    busy: incompatible holders of a level hold it for `wait` more ms
--                       (the latest of them, unless renewed), or another waiter's intent
--                       mark keeps this mode out of a level for `wait` more ms
--
-- The intent mark is what keeps a waiter from starving: holders it waits for cannot be
-- joined by new ones of their kind. A level has one mark at a time, the first waiter's; it
-- expires with the wait it was set for plus a claim time, so a vanished waiter's mark goes.
local CLAIM_MS = 250 -- keep in step with release.lua: how long a mark outlives the wait
-- CONFLICTS[m]: the modes a holder in mode m cannot share a level with.
local CONFLICTS = { { 4 }, { 3, 4 }, { 2, 4 }, { 1, 2, 3, 4 } }
local token, ttl, waits, waiter = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local levels = (#KEYS - 1) / 6
local now = clock_ms()

local function compatible(a, b)
  for _, c in ipairs(CONFLICTS[a]) do
    if c == b then
      return false
    end
  end
  return true
end

local function grant()
  for i = 1, levels do
    local set = KEYS[6 * (i - 1) + tonumber(ARGV[4 + i])]
    prune(set, now)
    put_entries(set, token, 1, now + ttl, nil)
    stretch(set, now)
    local intent = redis.call('GET', KEYS[6 * (i - 1) + 5])
    if intent and string.sub(intent, 2) == waiter then
      redis.call('DEL', KEYS[6 * (i - 1) + 5])
    end
  end
  return mint(KEYS[6 * levels + 1], 1)
end

if holds(KEYS[6 * (levels - 1) + tonumber(ARGV[4 + levels])], token, now) then
  return grant()
end
for i = 1, levels do
  local base, mode = 6 * (i - 1), tonumber(ARGV[4 + i])
  local wait = -1
  for _, c in ipairs(CONFLICTS[mode]) do
    local last = redis.call('ZRANGE', KEYS[base + c], -1, -1, 'WITHSCORES')
    if last[2] and tonumber(last[2]) > now then
      wait = math.max(wait, tonumber(last[2]) - now)
    end
  end
  local intent = redis.call('GET', KEYS[base + 5])
  if wait >= 0 then
    if waits ~= '0' then
      if not intent or string.sub(intent, 2) == waiter then
        redis.call('SET', KEYS[base + 5], mode .. waiter, 'PX', wait + CLAIM_MS)
      end
      redis.call('SET', KEYS[base + 6], '1', 'PX', wait + CLAIM_MS)
    end
    return -wait - 1
  end
  if intent and string.sub(intent, 2) ~= waiter
    and not compatible(tonumber(string.sub(intent, 1, 1)), mode) then
    local wanted = math.max(0, redis.call('PTTL', KEYS[base + 5]))
    if waits ~= '0' then
      -- The waiter that set the mark finds the level's holders marked too and publishes
      -- when it releases.
      redis.call('SET', KEYS[base + 6], '1', 'PX', wanted + CLAIM_MS)
    end
    return -wanted - 1
  end
end
return grant()
