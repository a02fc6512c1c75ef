-- Remove one partition of a deleted topic: its stream, meta hash and (a dense topic's) time
-- index, in its own hash slot.
-- KEYS[1] partition stream  KEYS[2] partition meta hash  KEYS[3] its time index
-- KEYS[4], KEYS[5] its open transactions and aborted index
-- KEYS[6..9] the log cleaner's pass, map, new key and lease (clean.lua)
-- ARGV[1] the deleted topic's id
-- A partition stamped by another id belongs to a topic of the same name created since: it
-- is left alone. UNLINK frees large streams in the background without blocking Redis.
-- Returns 1 when removed, 0 when left alone.
local stamped = redis.call('HGET', KEYS[2], 'id')
if stamped and stamped ~= ARGV[1] then
  return 0
end
redis.call('UNLINK', unpack(KEYS))
return 1
