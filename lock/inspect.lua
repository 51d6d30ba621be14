-- inspect.lua: read a lock's value, remaining TTL and absolute expiry in one step.
--
-- KEYS[1]  lock key
--
-- Returns {value, PTTL, PEXPIRETIME}, or nil if the key does not exist.
-- PEXPIRETIME (Redis 7+, unix ms; -1 without expiry) is 0 where Redis lacks it.
local v = redis.call('GET', KEYS[1])
if not v then return false end
local at = redis.pcall('PEXPIRETIME', KEYS[1])
if type(at) ~= 'number' then at = 0 end
return {v, redis.call('PTTL', KEYS[1]), at}
