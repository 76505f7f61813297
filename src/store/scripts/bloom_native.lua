-- bloom_native.lua: one operation on one or more shards of a Bloom filter kept by the
-- RedisBloom module (BF.* commands). Each shard is two keys in one hash slot: the module's
-- filter and a string holding the filter's configuration, which every operation checks and
-- which shares the filter's ttl (both are set in this one script).
--
-- KEYS   per shard: the filter's key, then its configuration's key
-- ARGV   op ('open', 'clear', 'add', 'contains' or 'count'), header (the configuration),
--        ttl_ms (0: no ttl), capacity (items per shard), error_rate, then for add and
--        contains, per shard in order: n, then its n items
--
-- Reply  an array, one text per shard, as bloom.lua answers ('M', 'X<header>', 'C' or 'E',
--        '0'/'1' per item; count answers the module's count of items added, in decimal).
-- The module's filters grow (a new sub-filter at the same error rate) past their capacity.
local op, header, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])
local capacity, error_rate = ARGV[4], ARGV[5]

local function check(filter, config)
  if redis.call('EXISTS', filter) == 0 then
    return 'M'
  end
  local stored = redis.call('GET', config) or ''
  if stored ~= header then
    return 'X' .. stored
  end
  return nil
end

local function create(filter, config)
  redis.call('DEL', config)
  redis.call('BF.RESERVE', filter, error_rate, capacity)
  redis.call('SET', config, header)
  if ttl > 0 then
    redis.call('PEXPIRE', filter, ttl)
    redis.call('PEXPIRE', config, ttl)
  end
end

local reply = {}
local a = 6
for i = 1, #KEYS / 2 do
  local filter, config = KEYS[2 * i - 1], KEYS[2 * i]
  if op == 'open' or op == 'clear' then
    if op == 'clear' and not check(filter, config) then
      redis.call('DEL', filter, config)
    end
    local bad = check(filter, config)
    if bad == 'M' then
      create(filter, config)
      reply[i] = 'C'
    else
      reply[i] = bad or 'E'
    end
  elseif op == 'count' then
    local bad = check(filter, config)
    reply[i] = bad or tostring(redis.call('BF.CARD', filter))
  else
    local n = tonumber(ARGV[a])
    a = a + 1
    local bad = check(filter, config)
    if bad or n == 0 then
      reply[i] = bad or ''
    else
      local items = {}
      for j = 1, n do
        items[j] = ARGV[a + j - 1]
      end
      local command = 'BF.MADD'
      if op ~= 'add' then
        command = 'BF.MEXISTS'
      end
      local answers = redis.call(command, filter, unpack(items))
      local out = {}
      for j = 1, n do
        out[j] = tostring(answers[j])
      end
      reply[i] = table.concat(out)
    end
    a = a + n
  end
end
return reply
