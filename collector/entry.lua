-- What read.lua and claim.lua share (read.go puts it in front of each):
-- an entry as the scripts return it, and its size in bytes (its ID, field
-- names and values). An entry larger than largest, the most that may
-- decode, comes back as its ID and {"lockscope-oversize", bytes}: taken,
-- so the collector acknowledges it, but never sent whole.
local function bounded(e, largest)
  local n = #e[1]
  local fields = e[2]
  for j = 1, #fields do n = n + #fields[j] end
  if n > largest then
    return {e[1], {'lockscope-oversize', tostring(n)}}, n
  end
  return e, n
end
