-- pttl.lua: remaining TTL of a lock the caller still holds.
--
-- KEYS[1]  lock key
-- ARGV[1]  the holder's value head "ls1|<token>|<lease>|"
--
-- Returns the PTTL in milliseconds, or -3 if the key is gone or holds
-- another value.
local v = redis.call('GET', KEYS[1])
if v and string.sub(v, 1, #ARGV[1]) == ARGV[1] then
  return redis.call('PTTL', KEYS[1])
end
return -3
