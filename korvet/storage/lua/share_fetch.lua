-- ShareFetch on one partition (KIP-932): acquire records for a share session's consumer.
-- KEYS[1] partition stream  KEYS[2] partition meta hash
-- ARGV[1] Redis group (share:<group id>)  ARGV[2] consumer (m:<member id>)
-- ARGV[3] lock duration ms  ARGV[4] delivery count limit  ARGV[5] in-flight limit (records)
-- ARGV[6] records wanted  ARGV[7] where a new group starts: '0' (earliest), '$' (latest) or
--   the id of the last entry before it (by_duration)
-- ARGV[8] the parking consumer's name
--
-- One share group on one partition is one Redis consumer group on the partition's stream,
-- so its state is in the partition's slot. The rules are SharePartitionRedis.tla's (and
-- korvet/core/share_partition.py's plan_fetch, which tests/unit/core/test_share_partition.py
-- checks against Kafka's): each PEL entry is looked at once, lowest id first:
--   below the log start (a trimmed entry's reference)   XACK        (DropTrimmed)
--   a session's, idle below the lock duration           live lock   (counts in flight)
--   idle for the lock duration, or parked, at the limit  XACK        (ArchiveAtLimit)
--   idle for the lock duration, or parked, below it      claimable
-- then the lowest claimable entries are claimed (XCLAIM with min-idle the lock duration:
-- the claim raises the delivery counter and restarts the idle time), and only when none is
-- left claimable are new entries read (XREADGROUP >, counter 1), never more live locks than
-- the in-flight limit. Redis expires nothing: an entry idle for the lock duration is an
-- expired lock, on Redis' own clock.
-- A stream that does not exist yet has nothing to acquire, and the group is not created
-- (XGROUP CREATE ... MKSTREAM would make an empty stream the broker's bounds take for a
-- foreign one). The fetch leaves a mark in the meta hash instead, `share-start:<group>` =
-- '0': every record the partition will have comes after this fetch, so the group starts at
-- the first one whatever its reset ('latest' at an empty partition is its first record); an
-- AlterShareGroupOffsets on the empty partition sets the mark to its id (share_state.lua).
-- The first fetch that finds the stream creates the group at the mark, else at ARGV[7],
-- and removes the mark.
-- Returns {epochs, archived, {{id, delivery count, fields}, ...}} in id order.
local stream, meta = KEYS[1], KEYS[2]
local group, consumer = ARGV[1], ARGV[2]
local lock, limit, max_locks = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local wanted, park = tonumber(ARGV[6]), ARGV[8]
local mark = 'share-start:' .. group

if redis.call('EXISTS', stream) == 0 then
  redis.call('HSETNX', meta, mark, '0')
  return {'', 0, {}}
end
local start_at = redis.call('HGET', meta, mark)
local created = redis.pcall('XGROUP', 'CREATE', stream, group, start_at or ARGV[7])
if type(created) == 'table' and created.err and not string.find(created.err, 'BUSYGROUP') then
  return redis.error_reply(created.err)
end
if start_at then redis.call('HDEL', meta, mark) end

local function parse(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq)
end
local fields = redis.call('HMGET', meta, 'start', 'epochs')
local start_ms, start_seq = 0, 0
if fields[1] then start_ms, start_seq = parse(fields[1]) end
local function trimmed(id)
  local ms, seq = parse(id)
  return ms < start_ms or (ms == start_ms and seq < start_seq)
end

local archived, live = 0, 0
local claimable = {}
local summary = redis.call('XPENDING', stream, group)
if summary[1] > 0 then
  for _, p in ipairs(redis.call('XPENDING', stream, group, '-', '+', summary[1])) do
    local id, owner, idle, count = p[1], p[2], p[3], p[4]
    if trimmed(id) then
      redis.call('XACK', stream, group, id)
      archived = archived + 1
    elseif owner ~= park and idle < lock then
      live = live + 1
    elseif count >= limit then
      redis.call('XACK', stream, group, id)
      archived = archived + 1
    else
      claimable[#claimable + 1] = {id, count}
    end
  end
end

local room = math.min(wanted, max_locks - live)
local got = {}
local claimed = 0
for _, c in ipairs(claimable) do
  if claimed >= room then break end
  local reply = redis.call('XCLAIM', stream, group, consumer, lock, c[1])
  if reply[1] then
    got[#got + 1] = {reply[1][1], c[2] + 1, reply[1][2]}
  end
  claimed = claimed + 1
end
if claimed == #claimable and claimed < room then
  local reply = redis.call('XREADGROUP', 'GROUP', group, consumer, 'COUNT', room - claimed,
                           'STREAMS', stream, '>')
  if reply then
    for _, e in ipairs(reply[1][2]) do
      got[#got + 1] = {e[1], 1, e[2]}
    end
  end
end
return {fields[2] or '', archived, got}
