-- force.lua: operator release of what the operator saw.
--
-- KEYS[1]  lock key
-- ARGV[1]  fingerprint: hex sha1 of the value the operator was shown, then
--          optionally "@" and the key's PEXPIRETIME then (a holder whose
--          value cannot tell it from a successor: the expiry can), or "@any"
--          (no expiry check: the operator accepted that it cannot be told)
--
-- Returns nil if the key does not exist, {1, value, PTTL, PEXPIRETIME} if the
-- value (and expiry) still matched and the key was deleted, {0, ...} if it
-- holds another value or expiry now (then nothing is changed).
local v = redis.call('GET', KEYS[1])
if not v then return false end
local pttl = redis.call('PTTL', KEYS[1])
local at = redis.pcall('PEXPIRETIME', KEYS[1])
if type(at) ~= 'number' then at = 0 end
local fp, want = string.match(ARGV[1], '^(%x+)@(.+)$')
if not fp then fp = ARGV[1] end
if redis.sha1hex(v) ~= fp then return {0, v, pttl, at} end
if want and want ~= 'any' and tonumber(want) ~= at then return {0, v, pttl, at} end
redis.call('DEL', KEYS[1])
return {1, v, pttl, at}
