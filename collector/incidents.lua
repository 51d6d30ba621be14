-- incidents.lua: merge incident records into the shared history, by id.
--
-- KEYS[1]  the history: a hash, incident id -> record (JSON, see incidents.go)
-- ARGV[1]  the most records kept, N: past N + N/4 the least recent are
--          dropped, down to N, with those last active before ARGV[2]
-- ARGV[2]  the oldest last activity (unix ms) a trim keeps
-- ARGV[3]  the history's lifetime (ms) after its last write
-- ARGV[4]  the most keys, ARGV[5] the most owners one record lists
-- ARGV[6]  the keys' budget, ARGV[7] the owners' budget (bytes of their
--          base64 text, plus 3 an entry), ARGV[8] the detail's (bytes of
--          its base64 text), ARGV[9] the most bytes of kind, ended_by and
--          cause, ARGV[10] an overlap's leases' budget (as the owners')
-- ARGV[11…] id, record pairs
--
-- Every replica writes every incident it derives, so a record merges into
-- the one stored under its id: keys and owners are added while they fit
-- the counts and budgets, the earliest start and the latest end (with its
-- ended_by) win, the larger count, the first detail. An overlap's record
-- and its first hold's lease_lost fragment share an id: the overlap's kind,
-- times and detail win, its cause, leases and refusal counts (the largest)
-- are kept. A stored record that
-- is not one (not JSON, or fields of other types) is replaced by the new
-- one; a trim drops such records first. So no record, and no merge, makes
-- a record larger than the budgets, and no stored value stops the writes.
-- Returns { records in the history, malformed records replaced or dropped }.
local maxKeys, maxOwners = tonumber(ARGV[4]), tonumber(ARGV[5])
local keysBytes, ownerBytes = tonumber(ARGV[6]), tonumber(ARGV[7])
local detailMax, wordMax = tonumber(ARGV[8]), tonumber(ARGV[9])
local leaseBytes = tonumber(ARGV[10])

local function str(v, max)
  if type(v) ~= 'string' or #v > max then return nil end
  return v
end

-- union lists the strings of a, then those of b not in a, while they fit
-- cap entries and budget bytes (an entry costs #v + 3); nil when none.
local function union(a, b, cap, budget)
  local out, seen, used = {}, {}, 0
  -- Not ipairs({ a, b }): it stops at a nil a and would drop all of b.
  for _, l in ipairs({ a or false, b or false }) do
    if type(l) == 'table' then
      for _, v in ipairs(l) do
        if #out >= cap then break end
        if type(v) == 'string' and not seen[v] and used + #v + 3 <= budget then
          seen[v] = true
          used = used + #v + 3
          out[#out + 1] = v
        end
      end
    end
  end
  if #out == 0 then return nil end -- cjson writes an empty table as {}
  return out
end

-- sane returns the record v decodes to, within the budgets, or nil when v
-- is not a record.
local function sane(v)
  local ok, r = pcall(cjson.decode, v)
  if not ok or type(r) ~= 'table' then return nil end
  local start = tonumber(r.start)
  if not start or start <= 0 or not str(r.kind, wordMax) then return nil end
  local detail = str(r.detail, 1e9)
  if detail then detail = string.sub(detail, 1, detailMax - detailMax % 4) end
  return {
    kind = r.kind,
    keys = union(r.keys, nil, maxKeys, keysBytes),
    owners = union(r.owners, nil, maxOwners, ownerBytes),
    start = start,
    ['end'] = tonumber(r['end']) or 0,
    ended_by = str(r.ended_by, wordMax),
    detail = detail,
    count = tonumber(r.count),
    cause = str(r.cause, wordMax),
    leases = union(r.leases, nil, maxOwners, leaseBytes),
    renewals_refused = tonumber(r.renewals_refused),
    writes_refused = tonumber(r.writes_refused),
  }
end

local function last(r)
  return math.max(r.start, r['end'])
end

local bad = 0
for i = 11, #ARGV, 2 do
  local id, rec = ARGV[i], sane(ARGV[i + 1])
  local stored = redis.call('HGET', KEYS[1], id)
  local o = stored and sane(stored)
  if stored and not o then bad = bad + 1 end
  if rec and o then
    if rec.kind == 'overlap' and o.kind ~= 'overlap' then
      o.kind, o.start, o['end'], o.ended_by, o.detail = rec.kind, rec.start, rec['end'], rec.ended_by, rec.detail
    elseif o.kind == 'overlap' and rec.kind ~= 'overlap' then
      rec.start, rec['end'], rec.ended_by, rec.detail = o.start, o['end'], o.ended_by, o.detail
    end
    o.keys = union(o.keys, rec.keys, maxKeys, keysBytes)
    o.owners = union(o.owners, rec.owners, maxOwners, ownerBytes)
    if rec.start < o.start then o.start = rec.start end
    if rec['end'] > o['end'] then
      o['end'], o.ended_by = rec['end'], rec.ended_by
    elseif rec['end'] == o['end'] and (o.ended_by or '') == '' then
      o.ended_by = rec.ended_by
    end
    if (rec.count or 0) > (o.count or 0) then o.count = rec.count end
    if (o.detail or '') == '' then o.detail = rec.detail end
    if (o.cause or '') == '' then o.cause = rec.cause end
    o.leases = union(o.leases, rec.leases, maxOwners, leaseBytes)
    for _, f in ipairs({ 'renewals_refused', 'writes_refused' }) do
      if (rec[f] or 0) > (o[f] or 0) then o[f] = rec[f] end
    end
    rec = o
  end
  if rec then redis.call('HSET', KEYS[1], id, cjson.encode(rec)) end
end
redis.call('PEXPIRE', KEYS[1], ARGV[3])

local n, keep = redis.call('HLEN', KEYS[1]), tonumber(ARGV[1])
if n <= keep + math.floor(keep / 4) then return { n, bad } end
local all = redis.call('HGETALL', KEYS[1])
local recs = {}
for i = 1, #all, 2 do
  local r = sane(all[i + 1])
  if not r then bad = bad + 1 end
  recs[#recs + 1] = { all[i], r and last(r) or 0 }
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
return { n - #del, bad }
