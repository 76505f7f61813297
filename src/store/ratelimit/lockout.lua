-- ratelimit/lockout.lua: a policy's lockout after a breach, escalating. Mirrors
-- src/store/ratelimit/lockout.rs.
--
-- spec     ARGV text "<memory>:<step 1>:<step 2>...", µs: the blocks' lengths by breach (the
--          last repeats) and how long breaches are remembered after the latest block ends
-- key      string "<end>:<breaches>": the end of the subject's latest block (µs) and how
--          many breaches are remembered; it expires `memory` after the block ends, and reads
--          as absent from then on whatever its ttl
--
-- A check of the policy that it denies while the subject is not blocked is a breach: the
-- subject is blocked from now for the step of the breach's number. While blocked, the
-- policy's decision is masked (lockout_mask): denied, nothing left, nothing applied.

-- The memory and the steps of a spec.
local function lockout_spec(spec)
  local memory, steps = nil, {}
  for n in string.gmatch(spec, '%d+') do
    if memory then
      steps[#steps + 1] = tonumber(n)
    else
      memory = tonumber(n)
    end
  end
  return memory, steps
end

-- The end of the subject's latest block and the breaches remembered, as of `now` (0, 0 when
-- there is none or it is past its memory).
local function lockout_read(key, now, spec)
  local stored = redis.call('GET', key)
  if not stored then
    return 0, 0
  end
  local ends, breaches = string.match(stored, '^(%d+):(%d+)$')
  if not ends then
    return 0, 0
  end
  ends, breaches = tonumber(ends), tonumber(breaches)
  local memory = lockout_spec(spec)
  if now >= ends + memory then
    return 0, 0
  end
  return ends, breaches
end

-- Masks decision d while the subject is blocked for `left` more µs: denied, nothing left;
-- the request passes at the later of the block's end and the policy's own retry, and the
-- policy is full again at the later of the block's end and its own reset.
local function lockout_mask(d, left)
  d.allowed = false
  if d.retry < left then
    d.retry = left
  end
  d.remaining = 0
  if d.reset < left then
    d.reset = left
  end
  d.apply = nil
  d.locked = left
end

-- A breach of decision d (which holds its lock's key, spec and remembered breaches) at `now`:
-- writes the new block and masks d with it.
local function lockout_breach(d, now, slack)
  local memory, steps = lockout_spec(d.lockout)
  local n = d.breaches + 1
  local step = steps[n] or steps[#steps]
  local ends = now + step
  redis.call('SET', d.lock_key, int_str(ends) .. ':' .. int_str(n), 'PX',
    ttl_ms(ends + memory - now, slack))
  lockout_mask(d, step)
end
