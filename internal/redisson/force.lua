-- force.lua: operator release of the Redisson lock the operator saw, as
-- Redisson's own forceUnlock releases it, waking its waiters.
--
-- KEYS[1]  the lock's hash
-- KEYS[2]  its fair-lock queue (redisson_lock_queue:{name}; absent for others)
-- KEYS[3]  its fair-lock timeouts (redisson_lock_timeout:{name})
-- ARGV[1]  fingerprint: hex sha1 of the hash's content as the operator saw
--          it (fields sorted, each followed by its value, each ended by "\n")
-- ARGV[2]  the lock's channel (redisson_lock__channel:{name})
-- ARGV[3]  its read-write channel (redisson_rwlock:{name})
-- ARGV[4]  now, unix ms (a fair lock's waiters past their timeout leave the queue)
-- ARGV[5]  the hash's PEXPIRETIME as the operator saw it (unix ms), or "any":
--          the same thread's next hold writes the same content, and only
--          the expiry tells it from the hold the operator saw
--
-- The caller has checked that content of this fingerprint is a Redisson
-- lock (the hash it read had it): a matching hash is that lock.
--
-- Returns nil if the key does not exist, {1, content, PTTL, PEXPIRETIME} if
-- the content and expiry still matched: the hash is deleted and the unlock message published, to
-- the first live waiter of a fair lock (channel:<its field>), on the
-- read-write channel for a read-write lock ("0" after readers, "1" after a
-- writer, as Redisson's forceUnlock), else on the lock's channel; {0,
-- content, PTTL, PEXPIRETIME} if the hash holds something else now, or has
-- another expiry (nothing changed).
local flat = redis.call('HGETALL', KEYS[1])
if #flat == 0 then return false end
local fields, values = {}, {}
for i = 1, #flat, 2 do
  fields[#fields + 1] = flat[i]
  values[flat[i]] = flat[i + 1]
end
table.sort(fields)
local parts = {}
for _, f in ipairs(fields) do
  parts[#parts + 1] = f .. '\n' .. values[f] .. '\n'
end
local content = table.concat(parts)
local pttl = redis.call('PTTL', KEYS[1])
local at = redis.pcall('PEXPIRETIME', KEYS[1])
if type(at) ~= 'number' then at = 0 end
if redis.sha1hex(content) ~= ARGV[1] then return {0, content, pttl, at} end
if ARGV[5] ~= 'any' and tonumber(ARGV[5]) ~= at then return {0, content, pttl, at} end
redis.call('DEL', KEYS[1])
local mode = values['mode']
if mode == 'read' then
  redis.call('PUBLISH', ARGV[3], '0')
elseif mode == 'write' then
  redis.call('PUBLISH', ARGV[3], '1')
else
  while true do
    local first = redis.call('LINDEX', KEYS[2], 0)
    if not first then break end
    local timeout = redis.call('ZSCORE', KEYS[3], first)
    if timeout and tonumber(timeout) <= tonumber(ARGV[4]) then
      redis.call('ZREM', KEYS[3], first)
      redis.call('LPOP', KEYS[2])
    else
      break
    end
  end
  local next = redis.call('LINDEX', KEYS[2], 0)
  if next then
    redis.call('PUBLISH', ARGV[2] .. ':' .. next, '0')
  else
    redis.call('PUBLISH', ARGV[2], '0')
  end
end
return {1, content, pttl, at}
