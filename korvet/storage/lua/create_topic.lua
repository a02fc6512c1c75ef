-- Create a topic atomically (so two brokers cannot both create it).
-- KEYS[1] topic hash {ks}:{topics}:topic:{name}   KEYS[2] topic set {ks}:{topics}:names
-- KEYS[3] id hash {ks}:{topics}:ids   (one slot: {topics}; the partitions are stamped after)
-- ARGV: name, id, partitions, created ms, validate_only (1/0), then config name/value pairs
-- Returns 'OK', 'EXISTS', or 'COLLIDES <other name>' (names equal up to '.' versus '_').
local name = ARGV[1]
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 'EXISTS'
end
local normalized = string.gsub(name, '%.', '_')
for _, other in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  if other ~= name and string.gsub(other, '%.', '_') == normalized then
    return 'COLLIDES ' .. other
  end
end
if ARGV[5] == '1' then
  return 'OK'
end
local fields = {'id', ARGV[2], 'name', name, 'partitions', ARGV[3], 'created', ARGV[4]}
for i = 6, #ARGV, 2 do
  fields[#fields + 1] = 'config.' .. ARGV[i]
  fields[#fields + 1] = ARGV[i + 1]
end
redis.call('HSET', KEYS[1], unpack(fields))
redis.call('SADD', KEYS[2], name)
redis.call('HSET', KEYS[3], ARGV[2], name)
return 'OK'
