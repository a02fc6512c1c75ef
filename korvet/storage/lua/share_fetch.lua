-- ShareFetch on one partition (KIP-932): acquire records for a share session's consumer.
-- KEYS[1] partition stream  KEYS[2] partition meta hash
-- ARGV[1] Redis group (share:<group id>)  ARGV[2] consumer (m:<member id>)
-- ARGV[3] lock duration ms  ARGV[4] delivery count limit  ARGV[5] in-flight limit (records)
-- ARGV[6] records wanted  ARGV[7] where a new group starts: '0' (earliest), '$' (latest) or
--   the id of the last entry before it (by_duration)
-- ARGV[8] the parking consumer's name
-- KEYS[3] the partition's aborted index (append.lua)  ARGV[9] '1': read_committed
--   (share.isolation.level): new records are read only below the last stable offset (the
--   meta hash's `lso`, the first id of the oldest open transaction), and a record of an
--   aborted transaction is archived (XACK) as it is read or claimed, never delivered, as
--   Kafka's share partition archives it at acquisition. Markers stay what they are under
--   read_uncommitted too: acquired, a control batch the client acknowledges.
-- ARGV[10] the partition's byte budget (ShareFetch's MaxBytes, shared out over the
--   partitions fetched): the first record is always acquired, however big (KIP-74, as
--   Kafka's share fetch returns the first batch); after it, only records whose sizes still
--   fit. A record's size is what it takes as a record batch of its own (61 bytes of batch
--   header and the record), which is what the response's batches cannot exceed: records
--   batched together share one header, and their deltas cost at most 14 bytes more each. So
--   the response stays within the budget and everything acquired is sent: nothing is left
--   acquired that the member never got. Each record is sized before it is claimed or read.
--
-- One share group on one partition is one Redis consumer group on the partition's stream,
-- so its state is in the partition's slot. The rules are SharePartitionRedis.tla's (and
-- korvet/core/share_partition.py's plan_fetch, which tests/unit/core/test_share_partition.py
-- checks against Kafka's): each PEL entry falls in one of these, lowest id first (only the
-- first and the last two are read, below):
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
local start_ms = 0
if fields[1] then start_ms = parse(fields[1]) end

-- Only the entries that are not live locks are read (XPENDING's IDLE filter): those below
-- the log start, and those idle for the lock duration (a parked entry always is: it is
-- parked with IDLE <lock>, SharePartitionRedis.tla's PelConsistent). The rest, the
-- live locks, are counted, not read: a fetch costs what it can claim, not the whole PEL.
local archived, live = 0, 0
local claimable = {}
local total = redis.call('XPENDING', stream, group)[1]
if total > 0 then
  local from, dropped = '-', 0
  if fields[1] and fields[1] ~= '0-0' then  -- nothing is below 0-0 (and '(0-0' is refused)
    for _, p in ipairs(redis.call('XPENDING', stream, group, '-', '(' .. fields[1], total)) do
      redis.call('XACK', stream, group, p[1])
      dropped = dropped + 1
    end
    from = fields[1]
  end
  archived = dropped
  local free = 0
  for _, p in ipairs(redis.call('XPENDING', stream, group, 'IDLE', lock, from, '+', total)) do
    local id, count = p[1], p[4]
    free = free + 1
    if count >= limit then
      redis.call('XACK', stream, group, id)
      archived = archived + 1
    else
      claimable[#claimable + 1] = {id, count}
    end
  end
  live = total - dropped - free
end

-- read_committed: the aborted transactions (producer id -> {{first id, marker id}, ...})
-- and the bound of new reads (the last stable offset's id; nil: the high watermark).
local committed = ARGV[9] == '1'
local aborted, stable = {}, nil
if committed then
  stable = redis.call('HGET', meta, 'lso') or nil
  for _, member in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], start_ms, '+inf')) do
    local pid, first, marker = string.match(member, '^(%S+) (%S+) (%S+)$')
    if pid then
      aborted[pid] = aborted[pid] or {}
      table.insert(aborted[pid], {first, marker})
    end
  end
end
local function less(a, b)
  local a_ms, a_seq = parse(a)
  local b_ms, b_seq = parse(b)
  return a_ms < b_ms or (a_ms == b_ms and a_seq < b_seq)
end
-- Whether the entry (id, its fields) is a record of an aborted transaction: its producer
-- (entries.py puts it first) aborted a transaction whose records span this id.
local function of_aborted(id, entry)
  if not committed or entry[1] ~= 'producer' then return false end
  local pid = string.match(entry[2], '^(%S+)')
  for _, range in ipairs(aborted[pid] or {}) do
    if not less(id, range[1]) and less(id, range[2]) then return true end
  end
  return false
end

-- The bytes a record-format entry takes as a record batch of its own (storage/entries.py's
-- fields; Kafka's record: varint lengths, zigzag-encoded, deltas 0 in a batch of its own).
-- A transaction marker is a control batch of 78 bytes.
local function varint(n)
  local v, size = (n >= 0) and 2 * n or -2 * n - 1, 1
  while v >= 128 do v, size = math.floor(v / 128), size + 1 end
  return size
end
local function bytes_of(entry)
  local key, value, headers, body = 1, 1, 0, 3  -- null key, null value; attributes, deltas
  for i = 1, #entry, 2 do
    local name, data = entry[i], entry[i + 1]
    if name == 'control' then return 78 end
    if name == 'key' then key = varint(#data) + #data
    elseif name == 'value' then value = varint(#data) + #data
    elseif string.sub(name, 1, 7) == 'header.' then
      headers = headers + 1
      body = body + varint(#name - 7) + #name - 7 + varint(#data) + #data
    elseif string.sub(name, 1, 12) == 'header-null.' then
      headers = headers + 1
      body = body + varint(#name - 12) + #name - 12 + 1
    end
  end
  body = body + key + value + varint(headers)
  return 61 + varint(body) + body
end
local budget, used = tonumber(ARGV[10]) or math.huge, 0  -- absent: no byte limit
-- Whether an entry of this size still goes in the response (the first always does).
local function fits(size)
  if used > 0 and used + size > budget then return false end
  used = used + size
  return true
end

local room = math.min(wanted, max_locks - live)
local got = {}
local taken, looked = 0, 0  -- room used (an entry gone from the stream too), claimable seen
local full = false  -- the byte budget stopped the fetch
for _, c in ipairs(claimable) do
  if taken >= room then break end
  local entry = redis.call('XRANGE', stream, c[1], c[1])[1]
  if entry and not of_aborted(entry[1], entry[2]) and not fits(bytes_of(entry[2])) then
    full = true
    break
  end
  looked = looked + 1
  local reply = redis.call('XCLAIM', stream, group, consumer, lock, c[1])
  if reply[1] and of_aborted(reply[1][1], reply[1][2]) then
    redis.call('XACK', stream, group, reply[1][1])
    archived = archived + 1
  else
    if reply[1] then got[#got + 1] = {reply[1][1], c[2] + 1, reply[1][2]} end
    taken = taken + 1
  end
end
-- Up to `count` new entries (XREADGROUP >): below the last stable offset only under
-- read_committed, and only as many as the byte budget takes (an aborted transaction's
-- records cost nothing: they are archived, not sent). The entries after the group's last
-- delivered id are looked at first (XRANGE), then exactly that many read.
local function read_new(count)
  local last = '0-0'
  for _, g in ipairs(redis.call('XINFO', 'GROUPS', stream)) do
    local info = {}
    for i = 1, #g, 2 do info[g[i]] = g[i + 1] end
    if info['name'] == group then last = info['last-delivered-id'] end
  end
  local upto = stable and ('(' .. stable) or '+'
  local n = 0
  for _, e in ipairs(redis.call('XRANGE', stream, '(' .. last, upto, 'COUNT', count)) do
    if not of_aborted(e[1], e[2]) and not fits(bytes_of(e[2])) then
      full = true
      break
    end
    n = n + 1
  end
  if n == 0 then return {} end
  local reply = redis.call('XREADGROUP', 'GROUP', group, consumer, 'COUNT', n,
                           'STREAMS', stream, '>')
  return reply and reply[1][2] or {}
end
if looked == #claimable and not full then
  -- none left claimable: new entries while there is room, those of aborted transactions
  -- archived and more read in their place
  while taken < room and not full do
    local entries = read_new(room - taken)
    local skipped = 0
    for _, e in ipairs(entries) do
      if of_aborted(e[1], e[2]) then
        redis.call('XACK', stream, group, e[1])
        archived, skipped = archived + 1, skipped + 1
      else
        got[#got + 1] = {e[1], 1, e[2]}
        taken = taken + 1
      end
    end
    if skipped == 0 then break end
  end
end
return {fields[2] or '', archived, got}
