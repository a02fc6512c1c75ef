-- Acquire a group's coordinator lease (spec/CoordinatorLease.tla, Acquire; the same
-- rule as korvet/core/lease.py may_acquire and grant).
-- KEYS[1] the group's lease hash (owner, token, expires: Redis' clock, ms)
-- KEYS[2] the group's snapshot (a string, in the lease's hash slot)
-- ARGV[1] broker id, ARGV[2] lease time (ms), ARGV[3] group id (for logs; the keys name the group)
-- A free, expired or same-broker lease is granted with the next token and the group's
-- durable snapshot is returned with it, in this one script: the new owner continues
-- from exactly what the last accepted write left.
-- Returns {1, token, snapshot or false} or {0, owner, milliseconds left}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local owner = redis.call('HGET', KEYS[1], 'owner')
local token = tonumber(redis.call('HGET', KEYS[1], 'token') or '0')
local expires = tonumber(redis.call('HGET', KEYS[1], 'expires') or '0')
if owner and owner ~= '' and expires > now and owner ~= ARGV[1] then
  return {0, owner, expires - now}
end
token = token + 1
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'token', token,
           'expires', now + tonumber(ARGV[2]))
return {1, token, redis.call('GET', KEYS[2])}
