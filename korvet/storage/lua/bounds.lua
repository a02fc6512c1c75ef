-- The bounds of a partition that has no meta hash yet (nothing was ever appended to it).
-- KEYS[1] stream  KEYS[2] partition meta  KEYS[3] topic hash
-- ARGV[1] now (ms)  ARGV[2] sequence bits  ARGV[3] topic id
--
-- An empty partition is given its log start and end now, at (now, 0), and the append script
-- will never hand out an offset below it: so the position a client is told now (EARLIEST or
-- LATEST, both this offset) stays valid, and once records arrive the log starts close to its
-- first record instead of at 0. Writing on a read happens once per partition.
-- Returns {last id, start id}, or {} when the topic is gone or the stream was written by
-- something else (the caller then reads Redis' own view).
local meta = redis.call('HMGET', KEYS[2], 'last', 'start')
if meta[1] then
  return {meta[1], meta[2] or '0-0'}
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {}
end
if redis.call('HGET', KEYS[3], 'id') ~= ARGV[3] then
  return {}
end
local now = tonumber(ARGV[1])
local bits = tonumber(ARGV[2])
local max_ms = 2 ^ (63 - bits) - 1
if now > max_ms then now = max_ms end
local last
if now > 0 then
  last = string.format('%d-%d', now - 1, 2 ^ bits - 1)
else
  last = '0-0'
end
local start = string.format('%d-%d', now, 0)
if now == 0 then start = '0-1' end
redis.call('HSET', KEYS[2], 'last', last, 'start', start)
return {last, start}
