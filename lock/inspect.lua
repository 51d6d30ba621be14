-- inspect.lua: read a lock's value and remaining TTL in one step.
--
-- KEYS[1]  lock key
--
-- Returns {value, PTTL}, or nil if the key does not exist.
local v = redis.call('GET', KEYS[1])
if not v then return false end
return {v, redis.call('PTTL', KEYS[1])}
