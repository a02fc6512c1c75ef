-- The bounds of a partition that has no meta hash yet (nothing was ever appended to it).
-- KEYS[1] stream  KEYS[2] partition meta  KEYS[3] the topic's stamp (the meta hash: `id`)
-- ARGV[1] now (ms)  ARGV[2] sequence bits (0: a dense topic)  ARGV[3] topic id
--
-- An empty partition is given its log start now, at (now, 0), and the append script never hands
-- out an offset below the log start: so the position a client is told now (EARLIEST or LATEST,
-- both this offset) stays valid, and once records arrive the log starts close to its first
-- record instead of at 0. Only `start` is written: the meta hash's `last` is the id of the last
-- entry append.lua wrote, and a read writes no entry (spec/PartitionLog.tla, ReadBounds).
-- Writing on a read happens once per partition. A dense topic's partitions start at offset 0,
-- the id 0-1 (korvet/core/offsets.py DenseCodec), whatever the clock.
-- Returns {last id or '', start id}: the high watermark is one past `last`, or the log start
-- when there is no `last`. Returns {} when the topic is gone or the stream was written by
-- something else (the caller then reads Redis' own view).
local OFFSET_BITS = 63  -- narrowed to the model's width by the spec replays, as in append.lua

local meta = redis.call('HMGET', KEYS[2], 'last', 'start')
if meta[1] or meta[2] then
  return {meta[1] or '', meta[2] or '0-0'}
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {}
end
if redis.call('HGET', KEYS[3], 'id') ~= ARGV[3] then
  return {}
end
local now = tonumber(ARGV[1])
local bits = tonumber(ARGV[2])
if bits == 0 then
  redis.call('HSET', KEYS[2], 'start', '0-1')
  return {'', '0-1'}
end
-- 2^(63 - bits) is exact as a double (the last millisecond, one less, is not for bits < 10).
local ms_end = 2 ^ (OFFSET_BITS - bits)
if now >= ms_end then now = ms_end - 1 end
local start = string.format('%d-%d', now, 0)
if now == 0 then start = '0-1' end  -- Redis refuses the id 0-0: offset 0 is never handed out
redis.call('HSET', KEYS[2], 'start', start)
return {'', start}
