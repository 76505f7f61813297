-- fenced.lua: a fenced write to one resource, or a read of it (src/fenced/ is the API; the
-- in-memory store's twin is src/store/memory/fenced.rs).
--
-- A write is refused when its fence is lower than the highest one the resource has accepted
-- (a holder whose lease expired writing after its successor); otherwise the resource records
-- its fence and applies its changes, all in one step. An equal fence is accepted: one holder
-- writes several times under one lease, and retries a write whose reply it lost.
--
-- KEYS[1]  the guard: a string, the highest fence accepted (decimal, no leading zeros)
-- KEYS[2]  the values: a hash, key -> value
--
-- A write, ARGV[1] = 'w':
-- ARGV[2]  the offered fence: decimal, 1 to 20 digits, no leading zeros (any u64)
-- ARGV[3]  ttl of both keys after the write, in milliseconds; '0': no expiry (the keys are
--          made persistent). The last accepted write decides.
-- ARGV[4]  c, the number of conditions
-- ARGV[5 .. 4+3c]     the conditions, three arguments each: kind, key, value.
--                     'a': key has no value (value '', unused); 'e': key holds value
-- ARGV[5+3c ..]       the changes, three arguments each, applied in order: kind, key, value.
--                     's': set key to value; 'd': delete key (value ''); 'c': delete every
--                     value (key and value '')
-- Reply  {1}          accepted: the guard now holds the offered fence (it held a lower or
--                     equal one, or none) and every change was applied
--        NOPERM error the ACL user may not run one of the commands a write needs (Redis 7.0+
--                     checks them all first: nothing was changed)
--        {0, last}    stale: the guard holds `last`, higher than the offered fence; nothing
--                     was changed
--        {-1, i}      the fence is not stale but condition i (1-based) does not hold;
--                     nothing was changed, the guard neither
-- The fence is compared first, so a stale holder learns that it is stale whatever the
-- values say.
--
-- A read, ARGV[1] = 'r' (the listed keys) or 'a' (every value):
-- ARGV[2 ..]  'r': the keys to read (none: the guard only)
-- Reply  {last, values}   last: the guard, '' when there is none; values: 'r': one value
--                         per listed key, nil when it has none; 'a': key, value, key,
--                         value... (HGETALL)
--
-- Fences are compared as decimal text (length, then two halves of at most 10 digits as
-- numbers), so every u64 compares exactly; Lua's doubles would not above 2^53.

-- Whether decimal fence a is lower than decimal fence b.
local function lower(a, b)
  if #a ~= #b then
    return #a < #b
  end
  local high_a, high_b = tonumber(string.sub(a, 1, -11)) or 0, tonumber(string.sub(b, 1, -11)) or 0
  if high_a ~= high_b then
    return high_a < high_b
  end
  return tonumber(string.sub(a, -10)) < tonumber(string.sub(b, -10))
end

local mode = ARGV[1]
if mode == 'r' then
  local last = redis.call('GET', KEYS[1]) or ''
  if #ARGV < 2 then
    return {last, {}}
  end
  return {last, redis.call('HMGET', KEYS[2], unpack(ARGV, 2))}
elseif mode == 'a' then
  return {redis.call('GET', KEYS[1]) or '', redis.call('HGETALL', KEYS[2])}
end

local fence, ttl, c = ARGV[2], ARGV[3], tonumber(ARGV[4])
local last = redis.call('GET', KEYS[1])
if last and lower(fence, last) then
  return {0, last}
end
for i = 1, c do
  local at = 4 + 3 * (i - 1)
  local kind, key = ARGV[at + 1], ARGV[at + 2]
  if kind == 'a' then
    if redis.call('HEXISTS', KEYS[2], key) == 1 then
      return {-1, i}
    end
  elseif redis.call('HGET', KEYS[2], key) ~= ARGV[at + 3] then
    return {-1, i}
  end
end
-- Redis does not roll a script back: an ACL user refused a command half way would leave the
-- write applied in part. So before the first write, check every write command the user may
-- need (Redis 7.0+; on 6.2 the check is not there) and refuse with nothing changed.
if redis.acl_check_cmd then
  for _, cmd in ipairs({
    {'SET', KEYS[1], fence}, {'PEXPIRE', KEYS[1], '1'}, {'HSET', KEYS[2], 'k', 'v'},
    {'HDEL', KEYS[2], 'k'}, {'DEL', KEYS[2]}, {'PEXPIRE', KEYS[2], '1'}, {'PERSIST', KEYS[2]},
  }) do
    if not redis.acl_check_cmd(unpack(cmd)) then
      return redis.error_reply('NOPERM this user has no permissions to run the ' .. cmd[1] ..
        ' command on the keys of a fenced resource (fenced.lua)')
    end
  end
end
if ttl == '0' then
  redis.call('SET', KEYS[1], fence)
else
  redis.call('SET', KEYS[1], fence, 'PX', ttl)
end
for at = 5 + 3 * c, #ARGV, 3 do
  local kind = ARGV[at]
  if kind == 's' then
    redis.call('HSET', KEYS[2], ARGV[at + 1], ARGV[at + 2])
  elseif kind == 'd' then
    redis.call('HDEL', KEYS[2], ARGV[at + 1])
  else
    redis.call('DEL', KEYS[2])
  end
end
if ttl == '0' then
  redis.call('PERSIST', KEYS[2])
else
  redis.call('PEXPIRE', KEYS[2], ttl)
end
return {1}
