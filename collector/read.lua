-- One bounded read through the consumer group (see readScript in read.go).
-- KEYS[1]: the stream. ARGV: group, consumer, start (">" for new entries,
-- an entry ID for this consumer's pending ones after it), most entries,
-- byte budget, largest entry that may decode.
--
-- Entries are taken one at a time until the budget is spent, so a read
-- brings at most the budget and one entry more, whatever the sizes a
-- writer of the stream chose. An entry larger than the decoder accepts
-- comes back as its stub (entry.lua's bounded). An entry trimmed while
-- pending comes back as its ID alone.
local group, consumer, id = ARGV[1], ARGV[2], ARGV[3]
local most, budget, largest = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local out, bytes = {}, 0
for _ = 1, most do
  local r = redis.call('XREADGROUP', 'GROUP', group, consumer, 'COUNT', 1, 'STREAMS', KEYS[1], id)
  if not r then break end
  local e = r[1][2][1]
  if not e then break end
  if id ~= '>' then id = e[1] end
  local n = #e[1]
  if not e[2] then
    out[#out + 1] = {e[1]}
  else
    local entry
    entry, n = bounded(e, largest)
    out[#out + 1] = entry
  end
  bytes = bytes + n
  if bytes >= budget then break end
end
return out
