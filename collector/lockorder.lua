-- lockorder.lua: merge lock-order edges into the shared graph, by id.
--
-- KEYS[1]  the graph: a hash, edge id -> record (JSON, see lockorder.go)
-- ARGV[1]  the most records kept, N: past N + N/4 the least recently seen
--          are dropped, down to N, with those last seen before ARGV[2]
-- ARGV[2]  the oldest last sighting (unix ms) a trim keeps
-- ARGV[3]  the graph's lifetime (ms) after its last write
-- ARGV[4]  the most owners one record lists
-- ARGV[5…] id, record pairs
--
-- Every replica writes every edge it counts, so a record merges into the
-- one stored under its id: the larger count (each replica counts the same
-- acquisitions), owners added, the earliest first and the latest last
-- sighting with that sighting's example keys. A stored record that cannot
-- be read is replaced, never an error: whoever may write the key must not
-- stop the replicas from writing. Returns the number of records.
local function union(a, b, cap)
  a = a or {}
  local seen, more = {}, false
  for _, v in ipairs(a) do seen[v] = true end
  for _, v in ipairs(b or {}) do
    if not seen[v] then
      if #a >= cap then
        more = true
        break
      end
      seen[v] = true
      a[#a + 1] = v
    end
  end
  if #a == 0 then return nil, more end -- cjson writes an empty table as {}
  return a, more
end

local function decode(s)
  local ok, r = pcall(cjson.decode, s)
  if ok and type(r) == 'table' then return r end
  return nil
end

local maxOwners = tonumber(ARGV[4])
for i = 5, #ARGV, 2 do
  local id, rec = ARGV[i], decode(ARGV[i + 1])
  if rec then
    local old = redis.call('HGET', KEYS[1], id)
    local o = old and decode(old)
    if o then
      local more
      o.owners, more = union(type(o.owners) == 'table' and o.owners or nil, rec.owners, maxOwners)
      o.more = (o.more == true) or (rec.more == true) or more or nil
      if (tonumber(rec.count) or 0) > (tonumber(o.count) or 0) then o.count = rec.count end
      local of, rf = tonumber(o.first) or 0, tonumber(rec.first) or 0
      if rf > 0 and (of == 0 or rf < of) then o.first = rec.first end
      if (tonumber(rec.last) or 0) > (tonumber(o.last) or 0) then
        o.last, o.from_key, o.to_key = rec.last, rec.from_key, rec.to_key
      end
      o.from, o.to = rec.from, rec.to
      rec = o
    end
    redis.call('HSET', KEYS[1], id, cjson.encode(rec))
  end
end
redis.call('PEXPIRE', KEYS[1], ARGV[3])

local n, keep = redis.call('HLEN', KEYS[1]), tonumber(ARGV[1])
if n <= keep + math.floor(keep / 4) then return n end
local all = redis.call('HGETALL', KEYS[1])
local recs = {}
for i = 1, #all, 2 do
  local r = decode(all[i + 1])
  recs[#recs + 1] = { all[i], r and tonumber(r.last) or 0 }
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
