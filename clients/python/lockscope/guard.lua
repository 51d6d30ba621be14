-- guard.lua: a fenced write to a Redis-held resource (FenceGuard.Set).
--
-- KEYS[1]  the highest fence the resource accepted (GuardKey of KEYS[2],
--          in its cluster hash slot); absent: none yet
-- KEYS[2]  the resource: a string key
-- ARGV[1]  the write's fence (Lease.Fence; below 2^53, exact in Lua)
-- ARGV[2]  the value to write
--
-- Writes ARGV[2] to KEYS[2] and records ARGV[1] as the highest fence if it
-- is at least the highest recorded: the check and the write are atomic, so
-- a holder that paused past its TTL cannot overwrite its successor's work.
-- Returns {1, fence} when written, {0, highest} when refused (nothing is
-- changed).
local high = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
local fence = tonumber(ARGV[1])
if fence < high then
  return {0, high}
end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], ARGV[2])
return {1, fence}
