-- ListOffsets by time on a dense topic: where to read from (spec/DenseLog.tla, IndexAnswer).
-- KEYS[1] the partition's time index (checkpoints <end>-0, field t)  KEYS[2] its meta hash
-- ARGV[1] the time asked (ms)
--
-- A checkpoint <end, t> says every record below offset `end` has a timestamp at most t; ends
-- and t grow. The answer (the first record at or after the log start whose timestamp is at or
-- after the time) then lies after the last checkpoint whose t is below the time: the records
-- from there are read in order (korvet/server/handlers/offsets.py), and they are at most the
-- topic's index.interval.bytes plus a batch before the next checkpoint, which reaches the time.
-- The search is a binary search by offset over the checkpoints: each probe one XRANGE COUNT 1.
-- Read-only.
-- Returns {} when no record ever appended has a timestamp at or after the time (tmax below it:
-- the answer is -1), else {offset to read from}.
local want = tonumber(ARGV[1])
local meta = redis.call('HMGET', KEYS[2], 'tmax', 'start', 'last')
local tmax = tonumber(meta[1])
if tmax == nil or tmax < want then
  return {}
end
local function offset_of(id)  -- the number before the dash
  return tonumber(string.sub(id, 1, string.find(id, '-', 1, true) - 1))
end
local start = meta[2] and offset_of(meta[2]) or 0
local high = meta[3] and offset_of(meta[3]) + 1 or start
-- The first checkpoint whose t reaches `want`: ends lie in start + 1 .. high.
local lo, hi, found = start + 1, high, nil
while lo <= hi do
  local mid = math.floor((lo + hi) / 2)
  local c = redis.call('XRANGE', KEYS[1], string.format('%d-0', mid), '+', 'COUNT', 1)[1]
  if c == nil then
    break  -- no checkpoint at or after mid: any reaching one is before it
  end
  if tonumber(c[2][2]) >= want then
    found = offset_of(c[1])
    hi = mid - 1
  else
    lo = offset_of(c[1]) + 1
  end
end
-- Read from the end of the checkpoint before it (the last one below the time), or the start.
local bound = found and string.format('(%d-0', found) or '+'
local before = redis.call('XREVRANGE', KEYS[1], bound, '-', 'COUNT', 1)[1]
local from = start
if before ~= nil and offset_of(before[1]) > from then
  from = offset_of(before[1])
end
return {from}
