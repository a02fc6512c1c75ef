-- Renew a group's coordinator lease (spec/CoordinatorLease.tla, Renew/RenewRefused;
-- korvet/core/lease.py renewal). KEYS[1] the lease hash; ARGV[1] the token held,
-- ARGV[2] lease time (ms). Returns 1 (renewed) or 0 (the token is no longer the lease's).
local token = redis.call('HGET', KEYS[1], 'token')
if not token or token ~= ARGV[1] then
  return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[1], 'expires', now + tonumber(ARGV[2]))
return 1
