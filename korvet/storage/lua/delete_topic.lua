-- Delete a topic's metadata and every partition stream atomically.
-- KEYS[1] topic hash   KEYS[2] topic set   KEYS[3] id hash
-- ARGV[1] keyspace, ARGV[2] topic name
-- Streams and partition meta keys are derived from the partition count stored in the
-- topic hash; UNLINK frees large streams in the background without blocking Redis.
-- Returns the number of partitions deleted, or -1 when the topic does not exist.
local topic = redis.call('HMGET', KEYS[1], 'id', 'partitions')
if topic[1] == false then
  return -1
end
local ks, name = ARGV[1], ARGV[2]
local partitions = tonumber(topic[2])
for p = 0, partitions - 1 do
  redis.call('UNLINK', ks .. ':stream:' .. name .. ':' .. p, ks .. ':partition:' .. name .. ':' .. p)
end
redis.call('UNLINK', KEYS[1])
redis.call('SREM', KEYS[2], name)
redis.call('HDEL', KEYS[3], topic[1])
return partitions
