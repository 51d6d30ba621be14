-- One bounded claim of other consumers' idle pending entries (see
-- claimScript in read.go). KEYS[1]: the stream. ARGV: group, consumer,
-- min idle time (ms), start (a PEL cursor), most entries, byte budget,
-- largest entry that may decode.
--
-- XAUTOCLAIM has no byte limit: COUNT 64 hands over 64 entries of whatever
-- size their writer chose, and a consumer that died holding the stubs of
-- read.lua's oversize entries would pass them on whole. So entries are
-- claimed one at a time until the budget is spent, an entry larger than
-- the decoder accepts comes back as its stub (entry.lua's bounded), and
-- entries trimmed while pending are counted.
--
-- Returns {next cursor ("0-0": the whole list was scanned), entries,
-- entries trimmed while pending}.
local group, consumer, idle, start = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local most, budget, largest = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local out, bytes, deleted = {}, 0, 0
for _ = 1, most do
  local r = redis.call('XAUTOCLAIM', KEYS[1], group, consumer, idle, start, 'COUNT', 1)
  start = r[1]
  for _, e in ipairs(r[2]) do
    if type(e) ~= 'table' or not e[2] then
      -- Redis 6.2 names an entry trimmed while pending this way.
      deleted = deleted + 1
    else
      local entry, n = bounded(e, largest)
      out[#out + 1] = entry
      bytes = bytes + n
    end
  end
  if r[3] then deleted = deleted + #r[3] end
  if start == '0-0' or bytes >= budget then break end
end
return {start, out, deleted}
