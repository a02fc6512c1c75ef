-- The coordinator's write of one step, applied only if every group it touches is
-- still leased with the token the writer holds (spec/CoordinatorLease.tla, Apply;
-- korvet/core/lease.py accepts). Nothing is written if one token is stale.
-- KEYS[1..n]   the lease hashes of the n groups the step touches
-- KEYS[n+1..]  the keys the operations name (snapshot strings, commit hashes, indexes,
--              group-ids; on Redis Cluster one group's keys, all in its slot)
-- ARGV[1]      n;  ARGV[2..n+1] the tokens held, in the order of KEYS[1..n]
-- ARGV[n+2]    JSON list of operations: [command, key index (into KEYS), args...],
--              command one of SET, HSET, HDEL, UNLINK, SADD, SREM
-- Returns {} when applied, else the positions (1..n) of the stale leases.
local n = tonumber(ARGV[1])
local stale = {}
for i = 1, n do
  if redis.call('HGET', KEYS[i], 'token') ~= ARGV[i + 1] then
    stale[#stale + 1] = i
  end
end
if #stale > 0 then
  return stale
end
local allowed = {SET = true, HSET = true, HDEL = true, UNLINK = true, SADD = true, SREM = true}
for _, op in ipairs(cjson.decode(ARGV[n + 2])) do
  local command = op[1]
  if not allowed[command] then
    return redis.error_reply('fenced_write: command not allowed: ' .. tostring(command))
  end
  local args = {}
  for j = 3, #op do args[#args + 1] = tostring(op[j]) end
  redis.call(command, KEYS[op[2]], unpack(args))
end
return {}
