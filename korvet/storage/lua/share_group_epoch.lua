-- A share group's durable record (korvet/storage/share_groups.py): its type and epoch.
-- KEYS[1] = {ks}:{group:G}:share; ARGV[1] = the group epoch.
-- The epoch only ever rises: a broker that lost the group's lease and writes late cannot
-- take it back. Returns the stored epoch afterwards.
local stored = tonumber(redis.call('HGET', KEYS[1], 'epoch') or '-1')
local epoch = tonumber(ARGV[1])
if epoch > stored then
  redis.call('HSET', KEYS[1], 'epoch', ARGV[1], 'type', 'share')
  stored = epoch
end
return stored
