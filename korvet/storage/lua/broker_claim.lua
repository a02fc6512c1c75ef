-- A broker's claim on its keyspace (korvet/storage/claims.py): who may coordinate here.
-- KEYS[1] the claims hash: field = broker id, value = JSON {instance, host, port, single,
-- expires (Redis' clock, ms), token}; field '#claims' counts every claim ever granted.
-- ARGV[1] 'claim', 'renew' or 'release'; ARGV[2] broker id; ARGV[3] this process' instance
-- (a random id: two processes with one broker id differ in it); ARGV[4] JSON {host, port,
-- single}; ARGV[5] time to live (ms); ARGV[6] 1 to take the claim whatever others hold
-- (the embedded Redis: nobody else can have been serving from it), else 0;
-- ARGV[7] (renew) the '#claims' count the claim was granted at.
--
-- claim: refused while another instance's entry is live (not expired) and has this broker
--   id, or either of the two runs as a single broker (single: true). Else the entry is
--   written with the next token. Returns {1, token, count} or {0, id, JSON, why}.
-- renew: the entry must still be this instance's; a single broker's also requires that no
--   claim was granted since its own (one was only possible after its entry expired: another
--   broker has served since). An entry that is gone while the count is below the one the
--   claim was granted at (Redis lost the hash) is claimed again. Returns {1, token, count}
--   or {0, id, JSON, why} (lost).
-- release: removes the entry if it is still this instance's. Returns {1}.
-- Entries expired for more than ten times their time to live are removed.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local op, id, instance = ARGV[1], ARGV[2], ARGV[3]
local mine = cjson.decode(ARGV[4])
local ttl = tonumber(ARGV[5])
local count = tonumber(redis.call('HGET', KEYS[1], '#claims') or '0')

local function entry_of(raw)
  local ok, entry = pcall(cjson.decode, raw)
  if ok and type(entry) == 'table' and tonumber(entry['expires']) then
    return entry
  end
  return nil
end

local current = redis.call('HGET', KEYS[1], id)
local held = current and entry_of(current)
if op == 'release' then
  if held and held['instance'] == instance then
    redis.call('HDEL', KEYS[1], id)
  end
  return {1}
end

if op == 'renew' and not held and (not mine['single'] or count < tonumber(ARGV[7])) then
  -- The entry is gone and, for a single broker, no claim was granted since its own: Redis
  -- lost the hash (it restarted without the write). Claim again, with the same checks as
  -- at start.
  op = 'claim'
end
if op == 'renew' then
  if not held or held['instance'] ~= instance then
    if held then
      return {0, id, current, 'id'}
    end
    return {0, id, cjson.encode({host = '', port = 0, single = false}), 'gone'}
  end
  if mine['single'] and count ~= tonumber(ARGV[7]) then
    -- the last claim granted is another broker's: find it to name it
    local all = redis.call('HGETALL', KEYS[1])
    local newest, newest_raw, newest_token = id, current, -1
    for i = 1, #all, 2 do
      local other = all[i] ~= '#claims' and all[i] ~= id and entry_of(all[i + 1])
      if other and tonumber(other['granted'] or 0) > newest_token then
        newest, newest_raw, newest_token = all[i], all[i + 1], tonumber(other['granted'] or 0)
      end
    end
    return {0, newest, newest_raw, 'single'}
  end
else
  if ARGV[6] ~= '1' then
    local all = redis.call('HGETALL', KEYS[1])
    for i = 1, #all, 2 do
      local other = all[i] ~= '#claims' and entry_of(all[i + 1])
      if other and other['instance'] ~= instance and tonumber(other['expires']) > now then
        if all[i] == id then
          return {0, all[i], all[i + 1], 'id'}
        end
        if other['single'] or mine['single'] then
          return {0, all[i], all[i + 1], 'single'}
        end
      elseif other and tonumber(other['expires']) + 10 * ttl < now then
        redis.call('HDEL', KEYS[1], all[i])
      end
    end
  end
  count = count + 1
  redis.call('HSET', KEYS[1], '#claims', count)
  held = {token = ((held and tonumber(held['token'])) or 0) + 1, granted = count}
end
mine['instance'] = instance
mine['expires'] = now + ttl
mine['token'] = held['token']
mine['granted'] = held['granted']
redis.call('HSET', KEYS[1], id, cjson.encode(mine))
return {1, mine['token'], count}
