-- fence.lua: minting fencing tokens. Concatenated in front of acquire.lua and handoff.lua, so
-- its locals are visible to them.
--
-- A fence is max(last + 1, server time in microseconds): fences strictly increase per lock
-- (and per prefix) even if the fence key was lost to a failover or a flush, as long as the
-- server clock does not step back further than the fences handed out since. One call that
-- grants several locks hands out consecutive numbers, so a fence leads the clock by at most
-- the number of grants in one call.
--
-- Cost: one `SET fence last GET` per run of grants under one key (raise the key to the clock,
-- reserving the run's numbers, and learn what it held); only when the key was ahead of the
-- clock (grants in the same microsecond, or the clock stepped back) does it get a second
-- write. The key never holds less than a fence returned by an earlier call, even if a call
-- fails part way (Redis does not roll a script back). Needs Redis 6.2 or newer (SET ... GET).

local now_str, now -- the server clock in µs (text and number), read once per call

-- Hands out `count` (>= 1) consecutive fences under `fence_key`; returns the first.
local function mint(fence_key, count)
  if now == nil then
    local t = redis.call('TIME')
    now_str = t[1] .. string.sub('00000' .. t[2], -6)
    now = tonumber(now_str)
  end
  local last = now + count - 1
  local reserve = count == 1 and now_str or string.format('%.0f', last)
  local old = tonumber(redis.call('SET', fence_key, reserve, 'GET') or '0') or 0
  if old >= now then
    -- The key was ahead of the clock and was just lowered: put it back above at once, so it
    -- is never left below a fence an earlier call returned.
    last = old + count
    redis.call('SET', fence_key, string.format('%.0f', last))
  end
  return last - count + 1
end
