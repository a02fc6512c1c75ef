-- DeleteRecords: raise a partition's log start and remove the entries below it, atomically.
-- KEYS[1] partition stream  KEYS[2] partition meta hash  KEYS[3] topic stamp (meta again)
-- KEYS[4] a dense topic's time index (its checkpoints below the new start go too)
-- ARGV[1] topic id  ARGV[2] partition index  ARGV[3] new start ms  ARGV[4] new start seq
-- ARGV[5] '1' when the topic stores batches (korvet.storage.format), else '0'
-- ARGV[6] sequence bits (0: a dense topic, whose ids are <offset>-1)
--
-- The broker checked the offset against Kafka's rules first (korvet/core/admin.py: not above
-- the high watermark, which only grows, so the check still holds here). This script only moves
-- the log start forward: XTRIM MINID removes every entry whose id is below the new start's id,
-- and the meta hash's `start` (the field append.lua and bounds.lua keep) becomes that id. A
-- start already past it is left alone (retention or another DeleteRecords got there first).
-- With the batches format, a batch entry that starts below the new start and ends at or past
-- it holds records that are kept: it stays, whole, and the entries before it go (a fetch at
-- the new start then returns that batch, as Kafka returns the batch holding a fetch offset).
-- A stream without a meta hash (written by something other than Korvet) has no `start`: the
-- trim alone moves its log start, which is then its first entry.
-- Returns {'OK', start ms, start seq} with the log start after the call, 'TRIMMED' (no meta
-- hash), or 'NO_TOPIC' / 'NO_PARTITION' (nothing done).
local topic = redis.call('HMGET', KEYS[3], 'id', 'partitions')
if topic[1] == false or topic[1] ~= ARGV[1] then
  return {'NO_TOPIC'}
end
if tonumber(ARGV[2]) >= tonumber(topic[2]) then
  return {'NO_PARTITION'}
end
local new_ms, new_seq = tonumber(ARGV[3]), tonumber(ARGV[4])
local new_id = string.format('%d-%d', new_ms, new_seq)

-- The id below which entries go: the new start, or the batch entry that holds it.
local function trim_id()
  if ARGV[5] ~= '1' then
    return new_id
  end
  -- Only look back when some entry lies below the new start (an XREVRANGE that finds nothing
  -- below its bound walks the whole stream in Redis 7.0).
  local first = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', 1)
  if #first == 0 then
    return new_id
  end
  local holder = redis.call('XREVRANGE', KEYS[1], new_id, '-', 'COUNT', 1)
  if #holder == 0 or holder[1][2][1] ~= 'records' then
    return new_id
  end
  local dash = string.find(holder[1][1], '-', 1, true)
  local ms = tonumber(string.sub(holder[1][1], 1, dash - 1))
  local bits = tonumber(ARGV[6])
  local bias = bits == 0 and 1 or 0
  local seq = tonumber(string.sub(holder[1][1], dash + 1)) - bias + tonumber(holder[1][2][2]) - 1
  local limit = 2 ^ bits
  ms, seq = ms + math.floor(seq / limit), seq % limit + bias
  if ms > new_ms or (ms == new_ms and seq >= new_seq) then
    return holder[1][1]
  end
  return new_id
end
local meta = redis.call('HMGET', KEYS[2], 'last', 'start')
if not meta[1] and not meta[2] then
  redis.call('XTRIM', KEYS[1], 'MINID', trim_id())
  return {'TRIMMED'}
end
if meta[2] then
  local dash = string.find(meta[2], '-', 1, true)
  local ms, seq = tonumber(string.sub(meta[2], 1, dash - 1)), tonumber(string.sub(meta[2], dash + 1))
  if ms > new_ms or (ms == new_ms and seq >= new_seq) then
    return {'OK', ms, seq}
  end
end
redis.call('XTRIM', KEYS[1], 'MINID', trim_id())
redis.call('HSET', KEYS[2], 'start', new_id)
if tonumber(ARGV[6]) == 0 and KEYS[4] then
  redis.call('XTRIM', KEYS[4], 'MINID', string.format('%d-0', new_ms + 1))
end
return {'OK', new_ms, new_seq}
