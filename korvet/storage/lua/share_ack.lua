-- ShareAcknowledge (or acknowledgements piggy-backed on ShareFetch) on one partition.
-- KEYS[1] partition stream  KEYS[2] partition meta hash
-- ARGV[1] Redis group  ARGV[2] consumer  ARGV[3] lock duration ms  ARGV[4] delivery limit
-- ARGV[5] the parking consumer's name; then pairs: entry id, acknowledge type
--   (0 GAP, 1 ACCEPT, 2 RELEASE, 3 REJECT, 4 RENEW), ids distinct and ascending
--
-- Redis' XACK checks nothing; Kafka applies an acknowledgement only from the record's owner
-- under a live lock. So every id is checked first (SharePartitionRedis.tla's Guard: the
-- entry is pending, its owner the caller, idle below the lock duration, not below the log
-- start) and, as Kafka does for one partition's acknowledgements, none is applied when one
-- fails. Then ACCEPT, REJECT and GAP are XACK (Redis cannot tell them apart afterwards);
-- RELEASE parks the entry on the parking consumer with its idle time at the lock duration
-- (the next fetch claims it at once, its counter unchanged), or XACKs it at the delivery
-- limit (archived); RENEW re-claims it for the caller with JUSTID (idle 0, counter kept).
-- Returns {'INVALID', id} for the first id the guard refuses, else
-- {'OK', accepted, archived, released, renewed}.
local stream, meta = KEYS[1], KEYS[2]
local group, consumer = ARGV[1], ARGV[2]
local lock, limit, park = tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]

local function parse(id)
  local ms, seq = string.match(id, '^(%d+)-(%d+)$')
  return tonumber(ms), tonumber(seq)
end
local start = redis.call('HGET', meta, 'start')
local start_ms, start_seq = 0, 0
if start then start_ms, start_seq = parse(start) end

local counts = {}
for i = 6, #ARGV, 2 do
  local id = ARGV[i]
  local ms, seq = parse(id)
  local p = redis.pcall('XPENDING', stream, group, id, id, 1)
  local e = type(p) == 'table' and not p.err and p[1]
  if not e or e[2] ~= consumer or e[3] >= lock
     or ms < start_ms or (ms == start_ms and seq < start_seq) then
    return {'INVALID', id}
  end
  counts[id] = e[4]
end

local accepted, archived, released, renewed = 0, 0, 0, 0
for i = 6, #ARGV, 2 do
  local id, kind = ARGV[i], ARGV[i + 1]
  if kind == '4' then
    redis.call('XCLAIM', stream, group, consumer, 0, id, 'JUSTID')
    renewed = renewed + 1
  elseif kind == '2' and counts[id] < limit then
    redis.call('XCLAIM', stream, group, park, 0, id, 'IDLE', lock, 'JUSTID')
    released = released + 1
  else
    redis.call('XACK', stream, group, id)
    if kind == '1' then accepted = accepted + 1 else archived = archived + 1 end
  end
end
return {'OK', accepted, archived, released, renewed}
