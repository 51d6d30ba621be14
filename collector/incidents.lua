-- incidents.lua: merge incident records into the shared history, by id.
--
-- KEYS[1]  the history: a hash, incident id -> record (JSON, see incidents.go)
-- ARGV[1]  the most records kept, N: past N + N/4 the least recent are
--          dropped, down to N, with those last active before ARGV[2]
-- ARGV[2]  the oldest last activity (unix ms) a trim keeps
-- ARGV[3]  the history's lifetime (ms) after its last write
-- ARGV[4]  the most keys, ARGV[5] the most owners one record lists
-- ARGV[6…] id, record pairs
--
-- Every replica writes every incident it derives, so a record merges into
-- the one stored under its id: keys and owners are added, the earliest start
-- and the latest end (with its ended_by) win, the larger count, the first
-- detail. Returns the number of records in the history.
local function union(a, b, cap)
  a = a or {}
  local seen = {}
  for _, v in ipairs(a) do seen[v] = true end
  for _, v in ipairs(b or {}) do
    if #a >= cap then break end
    if not seen[v] then
      seen[v] = true
      a[#a + 1] = v
    end
  end
  if #a == 0 then return nil end -- cjson writes an empty table as {}
  return a
end

local function last(r)
  return math.max(tonumber(r.start) or 0, tonumber(r['end']) or 0)
end

local maxKeys, maxOwners = tonumber(ARGV[4]), tonumber(ARGV[5])
for i = 6, #ARGV, 2 do
  local id, rec = ARGV[i], cjson.decode(ARGV[i + 1])
  local old = redis.call('HGET', KEYS[1], id)
  if old then
    local o = cjson.decode(old)
    o.keys = union(o.keys, rec.keys, maxKeys)
    o.owners = union(o.owners, rec.owners, maxOwners)
    local os, rs = tonumber(o.start) or 0, tonumber(rec.start) or 0
    if rs > 0 and (os == 0 or rs < os) then o.start = rec.start end
    local oe, re = tonumber(o['end']) or 0, tonumber(rec['end']) or 0
    if re > oe then
      o['end'], o.ended_by = rec['end'], rec.ended_by
    elseif re == oe and (o.ended_by or '') == '' then
      o.ended_by = rec.ended_by
    end
    if (tonumber(rec.count) or 0) > (tonumber(o.count) or 0) then o.count = rec.count end
    if (o.detail or '') == '' then o.detail = rec.detail end
    if (o.kind or '') == '' then o.kind = rec.kind end
    rec = o
  end
  redis.call('HSET', KEYS[1], id, cjson.encode(rec))
end
redis.call('PEXPIRE', KEYS[1], ARGV[3])

local n, keep = redis.call('HLEN', KEYS[1]), tonumber(ARGV[1])
if n <= keep + math.floor(keep / 4) then return n end
local all = redis.call('HGETALL', KEYS[1])
local recs = {}
for i = 1, #all, 2 do
  recs[#recs + 1] = { all[i], last(cjson.decode(all[i + 1])) }
end
table.sort(recs, function(x, y)
  if x[2] ~= y[2] then return x[2] > y[2] end
  return x[1] < y[1]
end)
local cutoff, del = tonumber(ARGV[2]), {}
for i = 1, #recs do
  if i > keep or recs[i][2] < cutoff then del[#del + 1] = recs[i][1] end
end
for i = 1, #del, 500 do
  redis.call('HDEL', KEYS[1], unpack(del, i, math.min(i + 499, #del)))
end
return n - #del
