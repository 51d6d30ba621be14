-- passive_write.lua: append the passive watch's events to the stream, for
-- the holder of the watcher lease only.
--
-- KEYS[1]  the watcher's fence key: the highest watcher fence that wrote
-- KEYS[2]  the stream
-- ARGV[1]  the writer's fence (its watcher lease's fencing token)
-- ARGV[2]  MINID ~ for the stream: the oldest entry ID kept ("": no
--          trimming), as event.Retention gives it
-- ARGV[3]  the entry's field/value pairs follow (none: only raise the fence)
--
-- Returns -1 and writes nothing when a higher fence has written (the writer
-- lost the lease to a successor), 0 when there was no entry to add, else
-- the added entry's ID.
local hw = tonumber(redis.call('GET', KEYS[1]) or '0')
local fence = tonumber(ARGV[1])
if fence < hw then return -1 end
if fence > hw then redis.call('SET', KEYS[1], ARGV[1]) end
if #ARGV < 3 then return 0 end
if ARGV[2] ~= '' then
  return redis.call('XADD', KEYS[2], 'MINID', '~', ARGV[2], '*', unpack(ARGV, 3))
end
return redis.call('XADD', KEYS[2], '*', unpack(ARGV, 3))
