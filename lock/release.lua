-- release.lua: delete a lock the caller still holds.
--
-- KEYS[1]  lock key
-- ARGV[1]  the holder's value head "ls1|<token>|<lease>|"
--
-- Returns 1 if deleted, 0 if the key is gone or holds another value (then
-- nothing is changed).
local v = redis.call('GET', KEYS[1])
if v and string.sub(v, 1, #ARGV[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
