-- obtain.lua: take the lock if it is free, optionally with a fencing token.
--
-- KEYS[1]  lock key
-- KEYS[2]  fence counter key, only when fencing (same hash slot as KEYS[1],
--          see FenceKey); it never expires
-- ARGV[1]  value head: "ls1|<token>|<lease>|"
-- ARGV[2]  value tail: "|<since ms>|<owner>"; the value is head..fence..tail
-- ARGV[3]  TTL in milliseconds
--
-- Returns the fence (0 without fencing) when obtained, or
-- {current value, PTTL} when the key holds another value.
--
-- The fence is max(counter + 1, server time in microseconds): it increases by
-- at least one per obtain, and if the counter is lost (a restart of a Redis
-- that persists nothing, a failover to a replica that missed the write) the
-- next fence still starts above every earlier one, because no earlier fence
-- was larger than the server clock when it was issued.
if not KEYS[2] and redis.call('SET', KEYS[1], ARGV[1] .. '0' .. ARGV[2], 'NX', 'PX', ARGV[3]) then
  return 0
end
local cur = redis.call('GET', KEYS[1])
if cur then
  if string.sub(cur, 1, #ARGV[1]) ~= ARGV[1] then
    return {cur, redis.call('PTTL', KEYS[1])}
  end
  -- Our own token: a request retried after its first run succeeded.
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return tonumber(string.match(cur, '^(%d+)', #ARGV[1] + 1))
end
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local fence = math.max(tonumber(redis.call('GET', KEYS[2]) or '0') + 1,
  tonumber(t[1]) * 1000000 + tonumber(t[2]))
local f = string.format('%.0f', fence)
redis.call('SET', KEYS[2], f)
redis.call('SET', KEYS[1], ARGV[1] .. f .. ARGV[2], 'PX', ARGV[3])
return fence
