-- Shared by acquire_read.lua and acquire_write.lua (glued in front of each): the answer to a
-- caller that finds the writer's hold at `writer_key` (its value `writer`), marking it as
-- waited for when the caller waits (`waits` not '0'), so that its release publishes.
local function writer_busy(writer_key, writer, waits)
  if waits ~= '0' then
    local last = string.byte(writer, -1)
    if last ~= 42 and last ~= 33 then -- 42: '*', 33: '!'
      redis.call('APPEND', writer_key, '*')
    end
  end
  return -math.max(0, redis.call('PTTL', writer_key)) - 1
end
