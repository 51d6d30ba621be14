-- refresh.lua: extend the TTL of a lock the caller still holds.
--
-- KEYS[1]  lock key
-- ARGV[1]  the holder's value head "ls1|<token>|<lease>|" (the secret token
--          makes it unique to one hold)
-- ARGV[2]  new TTL in milliseconds
--
-- Returns 1 if extended, 0 if the key is gone or holds another value (then
-- nothing is changed).
local v = redis.call('GET', KEYS[1])
if v and string.sub(v, 1, #ARGV[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
