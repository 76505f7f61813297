-- leader.lua: an election's leader record, kept beside its lock key (same hash tag, so one
-- slot on a cluster). The record names the leader (its term and identity) and the lease that
-- wrote it, by the SHA-1 of that lease's token (never the token itself); it counts only while
-- that lease still holds the lock, so a record left by a leader that crashed or was paused
-- past its lease is never read as the leader's. What the lock scripts compare is unchanged:
-- this script only reads the lock key.
--
-- KEYS[1]  the election's lock key (holds the leader's token, maybe followed by '*' or '!')
-- KEYS[2]  the record key: '<term>\n<sha1 of the token>\n<identity>', with a ttl
-- ARGV[1]  'put', 'read' or 'drop'
-- ARGV[2]  the lock's release channel (a pub/sub channel, not a key)
-- put:  ARGV[3] token, ARGV[4] term, ARGV[5] identity, ARGV[6] the record's ttl in ms.
--       Writes the record if the lock holds the token; publishes '' on the channel when the
--       record changed (a new leader), so that followers read it at once.
--       Reply 1 written, 0 the lock is not held by the token (nothing written).
-- read: Reply {term, identity, digest} if the record's lease holds the lock now, else false
--       (nil). The digest lets a quorum tell two leases' records apart.
-- drop: ARGV[3] token. Deletes the record if that token's lease wrote it, and publishes ''.
--       Reply 1 deleted, 0 not ours (or gone).
-- PUBLISH  set in front of this file: 'PUBLISH' on a single primary, 'SPUBLISH' on a cluster
local function holder()
  local value = redis.call('GET', KEYS[1])
  if not value then
    return nil
  end
  local last = string.byte(value, -1)
  if last == 42 or last == 33 then -- '*' or '!': a waiter's mark
    value = string.sub(value, 1, -2)
  end
  if value == '' then
    return nil -- reserved for a waiter, held by nobody
  end
  return value
end

-- The record's fields: term, the writer's token digest, identity.
local function fields(record)
  local a = string.find(record, '\n', 1, true)
  if not a then
    return nil
  end
  local b = string.find(record, '\n', a + 1, true)
  if not b then
    return nil
  end
  return string.sub(record, 1, a - 1), string.sub(record, a + 1, b - 1), string.sub(record, b + 1)
end

local op = ARGV[1]
if op == 'put' then
  if holder() ~= ARGV[3] then
    return 0
  end
  local record = ARGV[4] .. '\n' .. redis.sha1hex(ARGV[3]) .. '\n' .. ARGV[5]
  local old = redis.call('GET', KEYS[2])
  redis.call('SET', KEYS[2], record, 'PX', ARGV[6])
  if old ~= record then
    redis.call(PUBLISH, ARGV[2], '')
  end
  return 1
end

local record = redis.call('GET', KEYS[2])
if not record then
  if op == 'read' then
    return false
  end
  return 0
end
local term, digest, identity = fields(record)
if op == 'read' then
  local current = holder()
  if not term or not current or redis.sha1hex(current) ~= digest then
    return false
  end
  return {term, identity, digest}
end
-- drop
if digest ~= redis.sha1hex(ARGV[3]) then
  return 0
end
redis.call('DEL', KEYS[2])
redis.call(PUBLISH, ARGV[2], '')
return 1
