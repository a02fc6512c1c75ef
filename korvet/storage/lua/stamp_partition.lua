-- Stamp one partition with the topic it belongs to (after create_topic.lua or a partition
-- increase registered it). The append, bounds and delete-records scripts check this stamp, in
-- the partition's own hash slot, instead of the topic hash (another slot on Redis Cluster).
-- KEYS[1] partition stream  KEYS[2] partition meta hash  KEYS[3] its time index (dense)
-- KEYS[4], KEYS[5] its open transactions and aborted index
-- ARGV[1] topic id  ARGV[2] the topic's partition count
-- A partition still stamped by an earlier topic of the same name (its deletion did not get
-- that far) is emptied first: the new topic starts with no records. Returns 1 when stamped
-- now, 0 when it already was.
local stamped = redis.call('HGET', KEYS[2], 'id')
if stamped == ARGV[1] then
  return 0
end
if stamped then
  redis.call('UNLINK', KEYS[1], KEYS[2], KEYS[3] or KEYS[2], KEYS[4] or KEYS[2],
               KEYS[5] or KEYS[2])
end
redis.call('HSET', KEYS[2], 'id', ARGV[1], 'partitions', ARGV[2])
return 1
