-- The batch entry that holds an offset strictly inside it (storage format `batches`), for a
-- fetch from that offset: Kafka returns the whole batch holding the fetch offset, and the
-- client skips the records before it. Read-only.
-- KEYS[1] partition stream
-- ARGV[1] the offset's id (ms-seq)  ARGV[2] sequence bits (0: a dense topic, whose ids are
--         <offset>-1: the arithmetic below works on the sequence less that 1)
--
-- Returns {} when no entry starts below the offset or the last one that does ends before it
-- (the fetch's XRANGE from the offset's id then finds everything), else that entry,
-- {id, {field, value, ...}}, as XRANGE gives it.
--
-- An XREVRANGE that finds no entry at or below its bound walks the whole stream (Redis 7.0):
-- the first entry is looked at first, so the look back happens only when one exists.
local function split_id(id)
  local dash = string.find(id, '-', 1, true)
  return tonumber(string.sub(id, 1, dash - 1)), tonumber(string.sub(id, dash + 1))
end

local ms, seq = split_id(ARGV[1])
local first = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', 1)
if #first == 0 then
  return {}
end
local f_ms, f_seq = split_id(first[1][1])
if f_ms > ms or (f_ms == ms and f_seq >= seq) then
  return {}
end
local holder = redis.call('XREVRANGE', KEYS[1], ARGV[1], '-', 'COUNT', 1)[1]
local h_ms, h_seq = split_id(holder[1])
if h_ms == ms and h_seq == seq then
  return {}  -- the entry starts at the offset: the XRANGE returns it
end
local fields = holder[2]
if fields[1] ~= 'records' then
  return {}  -- not a batch entry (written by something else): it holds one offset
end
local bits = tonumber(ARGV[2])
local limit = 2 ^ bits
local bias = bits == 0 and 1 or 0
local last = h_seq - bias + tonumber(fields[2]) - 1
local l_ms, l_seq = h_ms + math.floor(last / limit), last % limit + bias
if l_ms < ms or (l_ms == ms and l_seq < seq) then
  return {}
end
return holder
