-- force.lua: operator release of what the operator saw.
--
-- KEYS[1]  lock key
-- ARGV[1]  fingerprint: hex sha1 of the value the operator was shown
--
-- Returns nil if the key does not exist, {1, value, PTTL} if the value still
-- matched and the key was deleted, {0, value, PTTL} if it holds another value
-- now (then nothing is changed).
local v = redis.call('GET', KEYS[1])
if not v then return false end
local pttl = redis.call('PTTL', KEYS[1])
if redis.sha1hex(v) ~= ARGV[1] then return {0, v, pttl} end
redis.call('DEL', KEYS[1])
return {1, v, pttl}
