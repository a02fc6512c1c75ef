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

-- The guard reads the caller's pending entries between the first and the last id in one
-- XPENDING (its consumer filter), not one XPENDING per id.
local counts = {}
if #ARGV >= 6 then
  local summary = redis.pcall('XPENDING', stream, group)  -- no group yet: nothing pending
  local total = (type(summary) == 'table' and not summary.err) and summary[1] or 0
  if total > 0 then
    local first, last = ARGV[6], ARGV[#ARGV - 1]
    local p = redis.pcall('XPENDING', stream, group, first, last, total, consumer)
    if type(p) == 'table' and not p.err then
      for _, e in ipairs(p) do
        if e[3] < lock then counts[e[1]] = e[4] end
      end
    end
  end
end
for i = 6, #ARGV, 2 do
  local id = ARGV[i]
  local ms, seq = parse(id)
  if not counts[id] or ms < start_ms or (ms == start_ms and seq < start_seq) then
    return {'INVALID', id}
  end
end

-- Applied in as few calls as the kinds allow: one XACK, one XCLAIM to the caller (RENEW),
-- one to the parking consumer (RELEASE), each for up to 1,000 ids at a time.
local acks, renews, parks = {}, {}, {}
local accepted, archived = 0, 0
for i = 6, #ARGV, 2 do
  local id, kind = ARGV[i], ARGV[i + 1]
  if kind == '4' then
    renews[#renews + 1] = id
  elseif kind == '2' and counts[id] < limit then
    parks[#parks + 1] = id
  else
    acks[#acks + 1] = id
    if kind == '1' then accepted = accepted + 1 else archived = archived + 1 end
  end
end
-- ids per call: Lua's unpack and Redis' argument lists stay small
local CHUNK = 1000
local function in_chunks(ids, head, tail)
  for i = 1, #ids, CHUNK do
    local args = {unpack(head)}
    for j = i, math.min(i + CHUNK - 1, #ids) do args[#args + 1] = ids[j] end
    for _, t in ipairs(tail) do args[#args + 1] = t end
    redis.call(unpack(args))
  end
end
in_chunks(renews, {'XCLAIM', stream, group, consumer, 0}, {'JUSTID'})
in_chunks(parks, {'XCLAIM', stream, group, park, 0}, {'IDLE', lock, 'JUSTID'})
in_chunks(acks, {'XACK', stream, group}, {})
return {'OK', accepted, archived, #parks, #renews}
