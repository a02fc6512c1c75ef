-- Unregister a topic atomically: its hash, its name and its id (all in the {topics} slot).
-- KEYS[1] topic hash   KEYS[2] topic name set   KEYS[3] id hash
-- ARGV[1] topic name
-- The partitions (each in its own slot) are dropped by drop_partition.lua afterwards: once
-- the stamp is gone every append to them answers NO_TOPIC.
-- Returns {topic id, partition count}, or {} when the topic does not exist.
local topic = redis.call('HMGET', KEYS[1], 'id', 'partitions')
if topic[1] == false then
  return {}
end
redis.call('UNLINK', KEYS[1])
redis.call('SREM', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], topic[1])
return {topic[1], tonumber(topic[2])}
