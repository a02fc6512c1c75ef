-- A share session closed (its connection, ShareFetch/ShareAcknowledge epoch -1, or the
-- partition forgotten): release what its consumer holds on one partition.
-- KEYS[1] partition stream  KEYS[2] partition meta hash
-- ARGV[1] Redis group  ARGV[2] consumer  ARGV[3] lock duration ms  ARGV[4] delivery limit
-- ARGV[5] the parking consumer's name
--
-- Kafka makes a closed session's acquired records AVAILABLE at once (ARCHIVED at the
-- delivery limit). Each of the consumer's entries at or above the log start is parked (XCLAIM
-- to the parking consumer, idle at the lock duration: the next fetch claims it), or XACKed at
-- the limit (SharePartitionRedis.tla's CloseSession); a trimmed entry's reference is left for
-- the fetch script to drop (DropTrimmed), so that one call is one step of the spec. Deleting the consumer
-- instead (XGROUP DELCONSUMER) would drop its entries from the PEL: records lost, the
-- refinement's mutant -CloseDelConsumer.
-- Returns {released, archived}.
local stream, meta = KEYS[1], KEYS[2]
local group, consumer = ARGV[1], ARGV[2]
local lock, limit, park = tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
if redis.call('EXISTS', stream) == 0 then
  return {0, 0}
end
local function parse(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq)
end
local start = redis.call('HGET', meta, 'start')
local start_ms, start_seq = 0, 0
if start then start_ms, start_seq = parse(start) end

local held = redis.pcall('XPENDING', stream, group, '-', '+', 1000000, consumer)
if type(held) ~= 'table' or held.err then
  return {0, 0}  -- no such group: nothing held
end
local released, archived = 0, 0
for _, p in ipairs(held) do
  local id, count = p[1], p[4]
  local ms, seq = parse(id)
  if ms < start_ms or (ms == start_ms and seq < start_seq) then
    -- trimmed: already archived to Kafka's eyes; the next fetch drops the reference
  elseif count >= limit then
    redis.call('XACK', stream, group, id)
    archived = archived + 1
  else
    redis.call('XCLAIM', stream, group, park, 0, id, 'IDLE', lock, 'JUSTID')
    released = released + 1
  end
end
return {released, archived}
