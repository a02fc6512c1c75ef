-- A broker's heartbeat in the registry, answered with the live brokers.
-- KEYS[1] the registry hash (field: broker id, value: JSON with host, port, rack and
-- expires, Redis' clock in ms); ARGV[1] broker id, ARGV[2] its JSON without expires,
-- ARGV[3] time to live (ms); ARGV[4] 1 to leave (a clean stop), else 0.
-- Entries expired for more than ten times the time to live are removed.
-- Returns a flat list: id, JSON, id, JSON, ... of the brokers whose entry has not expired.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[3])
if ARGV[4] == '1' then
  redis.call('HDEL', KEYS[1], ARGV[1])
else
  local entry = cjson.decode(ARGV[2])
  entry['expires'] = now + ttl
  redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(entry))
end
local live = {}
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local ok, entry = pcall(cjson.decode, all[i + 1])
  if ok and type(entry) == 'table' and tonumber(entry['expires']) then
    if tonumber(entry['expires']) > now then
      live[#live + 1] = all[i]
      live[#live + 1] = all[i + 1]
    elseif tonumber(entry['expires']) + 10 * ttl < now then
      redis.call('HDEL', KEYS[1], all[i])
    end
  end
end
return live
