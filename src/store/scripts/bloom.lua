-- bloom.lua: one operation on one or more shards of a Bloom filter kept in Redis bitmaps
-- (several shards only on a single primary or within one hash slot: a cluster sends each
-- slot's shards in a call of their own). Every shard is one string key: a 128-byte header
-- holding the filter's configuration, then the shard's bits. The client hashes the items
-- (xxh3-128, double hashing) and sends each item's bit positions, so all of an item's
-- positions go in one round trip and many items share a call.
--
-- KEYS   the shards' keys
-- ARGV   op ('open', 'clear', 'add', 'contains' or 'count'), header (exactly 128 bytes),
--        ttl_ms (0: no ttl), bits (per shard), k (positions per item), then for add and
--        contains, per key in order: n, then n × k bit positions (0 <= position < bits)
--
-- Reply  an array, one text per key:
--   'M'            the shard does not exist (expired or deleted): add and contains changed
--                  nothing (the client opens the filter again)
--   'X<header>'    the shard was made with another configuration (its header follows)
--   open, clear    'C' created (clear deletes first), 'E' it existed
--   add            one '1' (the item is new: one of its bits was 0) or '0' per item
--   contains       one '1' (maybe present) or '0' (certainly absent) per item
--   count          the number of bits set, in decimal
--
-- A shard is created whole (header, every bit, ttl) in one step, and every shard of one call
-- gets the same ttl at the same moment, so a filter's keys expire together.
local HEADER = 128
local op, header, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])
local bits, k = tonumber(ARGV[4]), tonumber(ARGV[5])
-- Items per BITFIELD call: at most 1500 positions, four arguments each, stay under Lua's
-- unpack limit (8000).
local chunk = math.max(1, math.floor(1500 / k))

-- nil if the shard is there with this configuration, else its reply.
local function check(key)
  local stored = redis.call('GETRANGE', key, 0, HEADER - 1)
  if stored == '' then
    return 'M'
  end
  if stored ~= header then
    return 'X' .. stored
  end
  return nil
end

local function create(key)
  redis.call('SETRANGE', key, 0, header)
  redis.call('SETBIT', key, HEADER * 8 + bits - 1, 0)
  if ttl > 0 then
    redis.call('PEXPIRE', key, ttl)
  end
end

local reply = {}
local a = 6
for i, key in ipairs(KEYS) do
  if op == 'open' or op == 'clear' then
    if op == 'clear' and not check(key) then
      redis.call('DEL', key)
    end
    local bad = check(key)
    if bad == 'M' then
      create(key)
      reply[i] = 'C'
    else
      reply[i] = bad or 'E'
    end
  elseif op == 'count' then
    local bad = check(key)
    reply[i] = bad or tostring(redis.call('BITCOUNT', key, HEADER, -1))
  else
    local n = tonumber(ARGV[a])
    a = a + 1
    local bad = check(key)
    if bad then
      reply[i] = bad
      a = a + n * k
    else
      local out = {}
      local first = 1
      while first <= n do
        local last = math.min(n, first + chunk - 1)
        local args = {}
        for _ = first, last do
          for h = 0, k - 1 do
            local position = HEADER * 8 + tonumber(ARGV[a + h])
            if op == 'add' then
              args[#args + 1] = 'SET'
              args[#args + 1] = 'u1'
              args[#args + 1] = position
              args[#args + 1] = 1
            else
              args[#args + 1] = 'GET'
              args[#args + 1] = 'u1'
              args[#args + 1] = position
            end
          end
          a = a + k
        end
        local command = 'BITFIELD'
        if op ~= 'add' then
          command = 'BITFIELD_RO'
        end
        local old = redis.call(command, key, unpack(args))
        for j = first, last do
          local base = (j - first) * k
          -- add: new if any bit was 0; contains: present if every bit is 1.
          local zero = false
          for h = 1, k do
            if old[base + h] == 0 then
              zero = true
            end
          end
          if op == 'add' then
            out[j] = zero and '1' or '0'
          else
            out[j] = zero and '0' or '1'
          end
        end
        first = last + 1
      end
      reply[i] = table.concat(out)
    end
  end
end
return reply
