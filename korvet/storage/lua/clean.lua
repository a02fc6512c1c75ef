-- The log cleaner of a compacted topic's partition (spec/Compaction.tla; docs/spec/compaction.md):
-- one pass is Begin, map chunks, copy chunks and a swap, each one call of this script, so no
-- call reads more than `chunk` entries whatever the partition's size, and appends, fetches,
-- retention and DeleteRecords run between two calls. Records format, both offset schemes: the
-- script works on entry ids and never does offset arithmetic, so an id is an offset here.
--
-- KEYS (one partition, one hash slot):
--   1 stream  2 meta hash  3 aborted index (sorted set, append.lua)
--   4 the pass  {..}:clean       hash: token, phase (map|copy), upto, cur, now, young, prev,
--                                keep, removed, kept, lastdel, dirty
--   5 the map   {..}:clean:map   hash: record key -> id of its latest record in the dirty section
--   6 the new key {..}:clean:new stream, RENAMEd over the stream at the swap
--   7 the lease {..}:clean:lease hash: owner, token, expires (Redis' clock, ms): one cleaner per
--                                partition among the brokers; every call of a pass checks it
-- ARGV 1 op: 'status' (read only), 'begin', 'step', 'abandon'
--      2 broker id  3 lease token (step, abandon)  4 now (the broker's clock, ms)
--      5 chunk (entries per call)  6 lease time (ms)
--      7 min.compaction.lag.ms  8 max.compaction.lag.ms  9 segment.ms
--     10 segment size in records (-1: none; a dense topic only)  11 delete.retention.ms
--     12 min.cleanable.dirty.ratio  13 1 for a dense topic
--   a step of a `batches` topic (its entries are whole producer batches, maybe compressed,
--   which Lua can neither decode nor rebuild with their CRC): the broker read the chunk from
--   the pass's cursor and decided (korvet/server/clean_batches.py, core/cleaner.py):
--      7 'batches'  8 the cursor it read from (a moved cursor: the call does nothing)
--      map:   9 the cursor after its chunk  10 the head's first id ('' if not found)
--            11 the entries mapped  12 1 when the map is done  13.. key, "<id> <delta>" pairs
--      copy:  9.. per entry below upto it read: id, records removed, kept (records on a
--            dense topic, 1 on a time one), k, then the entry's 2k fields (k 0: the entry
--            goes; k -1: it stays as it is)
--
-- Bounds are entry ids: an `upto` U is exclusive (the pass cleans the entries below it); the
-- id after `last` (the meta hash's last id) is written "<ms>-<seq + 1>", which compares as
-- the next id would whatever the scheme. The meta hash gains:
--   cseg     "<U> <t>": the active segment starts at U, its first record was seen at t (-1:
--            empty). Korvet's segment is a number: the cleaner rolls it once it is older than
--            min(segment.ms, max.compaction.lag.ms) (spec Roll) or, on a dense topic, holds
--            segment.bytes' worth of records (the broker turns bytes into records). t is when
--            the cleaner first saw the segment hold a record, never earlier than the record:
--            the head is at least the spec's.
--   cleaned  the checkpoint (spec cleanedTo): the entries below it were cleaned
--   swapped  the time of the last swap (spec lastSwap)
--   cclean   the entries below the checkpoint after the last swap (the clean section)
--
-- Returns: status -> {dirty, clean, overdue (0/1), busy (0/1)}; begin -> {'STARTED', token} |
-- {'BUSY', owner} | {'CLEAN'}; step -> {'MAP'} | {'COPY'} | {'CLEAN'} (nothing dirty: the
-- pass ended without a swap) | {'SWAPPED', removed, kept (in the clean section), entries} |
-- {'LOST'} (the lease moved on: the pass is another broker's now); abandon -> {'OK'} | {'LOST'}

local op = ARGV[1]
local now = tonumber(ARGV[4])
local chunk = tonumber(ARGV[5])

local FORGET_AT_ONCE = 1000  -- aborted transactions a swap looks at to forget

local function split(id)
  local dash = string.find(id, '-', 1, true)
  return tonumber(string.sub(id, 1, dash - 1)), tonumber(string.sub(id, dash + 1))
end

local function less(a, b)
  local am, as = split(a)
  local bm, bs = split(b)
  return am < bm or (am == bm and as < bs)
end

local function min_id(a, b)
  if less(b, a) then return b end
  return a
end

local function max_id(a, b)
  if less(a, b) then return b end
  return a
end

local function succ(id)
  local m, s = split(id)
  return string.format('%d-%d', m, s + 1)
end

-- Records below the exclusive bound U on a dense topic (offset o is the id o-1).
local function dense_count(u)
  local m, s = split(u)
  if s >= 2 then return m + 1 end
  return m
end

local function redis_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local meta = redis.call('HMGET', KEYS[2], 'last', 'start', 'lso', 'cseg', 'cleaned', 'swapped',
                        'cclean')
local last, start, lso = meta[1], meta[2] or '0-0', meta[3]

-- The entry's fields by name: timestamp, key, whether it has a value, producer, control,
-- delete horizon.
local function facts(f)
  local r = {}
  for i = 1, #f, 2 do
    local name = f[i]
    if name == 'timestamp' then r.ts = tonumber(f[i + 1])
    elseif name == 'max-timestamp' then r.ts = tonumber(f[i + 1])  -- a stored batch's
    elseif name == 'key' then r.key = f[i + 1]
    elseif name == 'value' then r.value = true
    elseif name == 'producer' then r.producer = string.match(f[i + 1], '^(%S+)')
    elseif name == 'control' then r.control = true
    elseif name == 'delete-horizon' then r.horizon = f[i + 1]; r.hpos = i
    end
  end
  return r
end

-- The active segment after the roll rule: {U, t}, and whether it changed.
local function segment(min_lag, max_lag, seg_ms, seg_records, dense)
  if last == false then
    return {start, -1}, meta[4] == false
  end
  local hw = succ(last)
  local u, t
  if meta[4] then
    u, t = string.match(meta[4], '^(%S+) (%S+)$')
    t = tonumber(t)
  else
    -- first sight of the partition: all of it is the active segment, seen now (its records
    -- may be younger than the cleaner knows)
    return {start, now}, true
  end
  if not less(u, hw) then
    return {u, -1}, t ~= -1
  end
  if t < 0 then
    return {u, now}, true
  end
  local by_time = now - t >= math.min(seg_ms, max_lag)
  local by_size = dense and seg_records > 0 and dense_count(hw) - dense_count(u) >= seg_records
  if by_time or by_size then
    return {hw, -1}, true
  end
  return {u, t}, false
end

-- The first uncleanable id before the young records are known: the active segment, the LSO.
local function upto_of(seg)
  local u = seg[1]
  if lso then u = min_id(u, lso) end
  return u
end

local function lease_check()
  local token = redis.call('HGET', KEYS[7], 'token')
  if token ~= ARGV[3] then return false end
  redis.call('HSET', KEYS[7], 'expires', redis_now() + tonumber(ARGV[6]))
  return true
end

if op == 'status' or op == 'begin' then
  local min_lag, max_lag, seg_ms = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9])
  local seg_records, retention = tonumber(ARGV[10]), tonumber(ARGV[11])
  local ratio, dense = tonumber(ARGV[12]), ARGV[13] == '1'
  local seg, changed = segment(min_lag, max_lag, seg_ms, seg_records, dense)
  local upto = upto_of(seg)
  local from = max_id(meta[5] or start, start)
  local clean = tonumber(meta[7] or '0')
  local dirty = 0
  local overdue = 0
  if less(from, upto) then
    if dense then
      dirty = dense_count(upto) - dense_count(from)
    else
      dirty = math.max(0, redis.call('XLEN', KEYS[1]) - clean)
    end
    local first = redis.call('XRANGE', KEYS[1], from, '(' .. upto, 'COUNT', 1)[1]
    if first == nil then
      dirty = 0
    else
      local ts = facts(first[2]).ts or now
      if ts + max_lag <= now then overdue = 1 end
    end
  end
  local owner = redis.call('HMGET', KEYS[7], 'owner', 'expires', 'token')
  local held = owner[1] and owner[1] ~= ARGV[2] and tonumber(owner[2] or '0') > redis_now()
  if op == 'status' then
    return {dirty, clean, overdue, held and 1 or 0}
  end
  if held then
    return {'BUSY', owner[1]}
  end
  if changed then
    redis.call('HSET', KEYS[2], 'cseg', string.format('%s %d', seg[1], seg[2]))
  end
  -- Kafka's LogCleanerManager: dirty above min.cleanable.dirty.ratio of the cleanable log, or
  -- a record dirty for longer than max.compaction.lag.ms
  if dirty == 0 or (dirty <= ratio * (dirty + clean) and overdue == 0) then
    return {'CLEAN'}
  end
  local token = tonumber(owner[3] or '0') + 1
  redis.call('HSET', KEYS[7], 'owner', ARGV[2], 'token', token,
             'expires', redis_now() + tonumber(ARGV[6]))
  -- a pass a dead cleaner left half done
  redis.call('DEL', KEYS[4], KEYS[5], KEYS[6])
  redis.call('HSET', KEYS[4], 'token', token, 'phase', 'map', 'upto', upto, 'cur', from,
             'now', now, 'young', now - min_lag, 'prev', meta[6] or '-1',
             'keep', retention, 'removed', 0, 'kept', 0, 'lastdel', '0-0', 'dirty', 0)
  return {'STARTED', token}
end

if op == 'abandon' then
  if redis.call('HGET', KEYS[7], 'token') ~= ARGV[3] then return {'LOST'} end
  redis.call('DEL', KEYS[4], KEYS[5], KEYS[6])
  redis.call('HSET', KEYS[7], 'expires', 0)
  return {'OK'}
end

-- op == 'step'
if not lease_check() then return {'LOST'} end
local pass = redis.call('HMGET', KEYS[4], 'token', 'phase', 'upto', 'cur', 'young', 'prev',
                        'keep', 'removed', 'kept', 'lastdel', 'dirty')
if pass[1] ~= ARGV[3] then return {'LOST'} end
if redis.call('HEXISTS', KEYS[2], 'id') == 0 then
  -- the topic was deleted under the pass: a swap would bring its stream back
  redis.call('DEL', KEYS[4], KEYS[5], KEYS[6])
  return {'LOST'}
end
local phase, upto, cur = pass[2], pass[3], pass[4]

-- The transactions aborted at or after the id `from`: producer id -> list of {first, marker}.
local function aborted_from(from)
  local ms = split(from)
  local out = {}
  for _, member in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], ms, '+inf')) do
    local pid, first, marker = string.match(member, '^(%S+) (%S+) (%S+)$')
    if pid then
      out[pid] = out[pid] or {}
      table.insert(out[pid], {first, marker})
    end
  end
  return out
end

local function is_aborted(aborted, pid, id)
  for _, range in ipairs(aborted[pid] or {}) do
    if not less(id, range[1]) and less(id, range[2]) then return true end
  end
  return false
end

local batches = ARGV[7] == 'batches'
if batches and ARGV[8] ~= cur then
  return {phase == 'map' and 'MAP' or 'COPY'}  -- read before a call of its own that moved on
end

if phase == 'map' and batches then
  for i = 13, #ARGV, 200 do
    redis.call('HSET', KEYS[5], unpack(ARGV, i, math.min(i + 199, #ARGV)))
  end
  local dirty = tonumber(pass[11]) + tonumber(ARGV[11])
  if ARGV[10] ~= '' then upto = ARGV[10] end
  if ARGV[12] ~= '1' then
    redis.call('HSET', KEYS[4], 'cur', ARGV[9], 'dirty', dirty)
    return {'MAP'}
  end
  if dirty == 0 then
    redis.call('DEL', KEYS[4], KEYS[5])
    redis.call('HSET', KEYS[7], 'expires', 0)
    return {'CLEAN'}
  end
  redis.call('HSET', KEYS[4], 'phase', 'copy', 'cur', '-', 'upto', upto, 'dirty', dirty)
  return {'COPY'}
end

if phase == 'map' then
  local got = redis.call('XRANGE', KEYS[1], cur, '(' .. upto, 'COUNT', chunk)
  local young = tonumber(pass[5])
  local dirty = tonumber(pass[11])
  local aborted = #got > 0 and aborted_from(got[1][1]) or {}
  local latest = {}
  local ended = #got < chunk
  for _, e in ipairs(got) do
    local r = facts(e[2])
    if r.ts ~= nil and r.ts > young then
      -- the first record younger than min.compaction.lag.ms: the head starts here
      upto = e[1]
      ended = true
      break
    end
    dirty = dirty + 1
    if r.key and not r.control and not (r.producer and is_aborted(aborted, r.producer, e[1])) then
      latest[r.key] = e[1]
    end
    cur = '(' .. e[1]
  end
  local flat = {}
  for k, id in pairs(latest) do
    flat[#flat + 1] = k
    flat[#flat + 1] = id
  end
  if #flat > 0 then redis.call('HSET', KEYS[5], unpack(flat)) end
  if not ended then
    redis.call('HSET', KEYS[4], 'cur', cur, 'dirty', dirty)
    return {'MAP'}
  end
  if dirty == 0 then
    redis.call('DEL', KEYS[4], KEYS[5])
    redis.call('HSET', KEYS[7], 'expires', 0)
    return {'CLEAN'}
  end
  redis.call('HSET', KEYS[4], 'phase', 'copy', 'cur', '-', 'upto', upto, 'dirty', dirty)
  return {'COPY'}
end

-- phase == 'copy': the next `chunk` entries into the new key with their ids; with at most
-- `chunk` left, the swap.
local got = redis.call('XRANGE', KEYS[1], cur, '+', 'COUNT', chunk + 1)
local swap = #got <= chunk
local n = math.min(#got, chunk)
local prev, keep_ms = tonumber(pass[6]), tonumber(pass[7])
local removed, kept, lastdel = tonumber(pass[8]), tonumber(pass[9]), pass[10]
local plan = nil
if batches then
  plan = {}
  local i = 9
  while i <= #ARGV do
    local k = tonumber(ARGV[i + 3])
    local p = {removed = tonumber(ARGV[i + 1]), kept = tonumber(ARGV[i + 2]), k = k}
    if k > 0 then p.fields = {unpack(ARGV, i + 4, i + 3 + 2 * k)} end
    plan[ARGV[i]] = p
    i = i + 4 + 2 * math.max(k, 0)
  end
  for j = 1, n do
    if less(got[j][1], upto) and plan[got[j][1]] == nil then
      -- an entry the broker did not read (retention removed some of its chunk since): this
      -- call stops before it
      n = j - 1
      swap = false
      break
    end
  end
  if n == 0 and not swap then return {'COPY'} end
end
local aborted = (n > 0 and not plan) and aborted_from(got[1][1]) or {}
local latest = {}
-- A tombstone (its key's latest) or a transaction marker below the head: its delete horizon
-- is fixed from the swap that first made it visible (first clean: pending; the next pass:
-- that swap's time plus delete.retention.ms), and it goes once the horizon has passed
-- (spec/Compaction.tla Keep, Mark). Whether it stays; the entry's fields carry the horizon.
local function horizon_keeps(r, f)
  local h
  if r.horizon == nil then
    h = 'pending'
  elseif r.horizon == 'pending' then
    h = string.format('%d', prev + keep_ms)
  else
    h = r.horizon
  end
  if h ~= 'pending' and now >= tonumber(h) then
    return false
  elseif r.horizon == nil then
    f[#f + 1] = 'delete-horizon'
    f[#f + 1] = h
  else
    f[r.hpos + 1] = h
  end
  return true
end
for i = 1, n do
  local id, f = got[i][1], got[i][2]
  local keep = true
  local gone = 1
  if plan and less(id, upto) then
    local p = plan[id]
    removed = removed + p.removed
    gone = 0
    if p.k == 0 then
      keep = false
    else
      kept = kept + p.kept
      if p.k > 0 then f = p.fields end
    end
  elseif less(id, upto) then
    local r = facts(f)
    if r.control then
      keep = horizon_keeps(r, f)  -- a marker: until its delete horizon, as a tombstone
    elseif r.key == nil then
      -- a record without a key (written before the topic became compacted): Kafka's cleaner
      -- drops it (LogCleaner.shouldRetainRecord), it can never be a key's latest
      keep = false
    elseif r.producer and is_aborted(aborted, r.producer, id) then
      keep = false  -- aborted data: no reader ever applies it
    else
      local l = latest[r.key]
      if l == nil then
        l = redis.call('HGET', KEYS[5], r.key) or false
        latest[r.key] = l
      end
      if l and less(id, l) then
        keep = false  -- superseded by a later record of its key
      elseif not r.value then
        keep = horizon_keeps(r, f)  -- a tombstone, its key's latest
      end
    end
    if keep then kept = kept + 1 end
  end
  if keep then
    redis.call('XADD', KEYS[6], id, unpack(f))
  else
    removed = removed + gone
    lastdel = id
  end
end
if not swap then
  redis.call('HSET', KEYS[4], 'cur', '(' .. got[n][1], 'removed', removed, 'kept', kept,
             'lastdel', lastdel)
  return {'COPY'}
end

-- The swap: what retention or DeleteRecords removed meanwhile stays removed, the stream's last
-- id and counters carry over, the consumer groups (the observability groups, the share
-- groups) are re-created where they were, a share group's records in flight with them, and
-- the new key takes the stream's place.
local info = redis.call('XINFO', 'STREAM', KEYS[1])
local s = {}
for i = 1, #info, 2 do s[info[i]] = info[i + 1] end
local last_gen = s['last-generated-id']
if redis.call('EXISTS', KEYS[6]) == 0 then
  redis.call('XADD', KEYS[6], last_gen, 'timestamp', '0')
  redis.call('XDEL', KEYS[6], last_gen)
end
local start_now = redis.call('HGET', KEYS[2], 'start')
if start_now then
  redis.call('XTRIM', KEYS[6], 'MINID', start_now)
end
local maxdel = max_id(s['max-deleted-entry-id'] or '0-0', lastdel)
redis.call('XSETID', KEYS[6], last_gen, 'ENTRIESADDED', s['entries-added'] or 0,
           'MAXDELETEDID', maxdel)
for _, g in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
  local gi = {}
  for i = 1, #g, 2 do gi[g[i]] = g[i + 1] end
  if gi['entries-read'] then
    redis.call('XGROUP', 'CREATE', KEYS[6], gi['name'], gi['last-delivered-id'], 'ENTRIESREAD',
               gi['entries-read'])
  else
    redis.call('XGROUP', 'CREATE', KEYS[6], gi['name'], gi['last-delivered-id'])
  end
  -- A share group's pending entries (its records in flight, storage/shares.py) carry over
  -- with their owner, idle time and delivery count: XCLAIM ... FORCE makes the entry in the
  -- new stream's group, and makes none for a record the pass removed (or retention trimmed),
  -- which is gone from the partition as a record below the log start is.
  if tonumber(gi['pending']) > 0 then
    for _, p in ipairs(redis.call('XPENDING', KEYS[1], gi['name'], '-', '+', gi['pending'])) do
      redis.call('XCLAIM', KEYS[6], gi['name'], p[2], 0, p[1], 'IDLE', p[3],
                 'RETRYCOUNT', p[4], 'FORCE', 'JUSTID')
    end
  end
end
-- The aborted index forgets a transaction once neither its data nor its marker is left (spec
-- Swap): its data below `upto` went in this pass, its marker once past its horizon. At most
-- FORGET_AT_ONCE are looked at by one swap (a call stays short); later passes see the rest.
local forget = {}
for _, member in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', split(upto), 'LIMIT', 0,
                                   FORGET_AT_ONCE)) do
  local marker = string.match(member, '^%S+ %S+ (%S+)$')
  if marker and less(marker, upto)
      and #redis.call('XRANGE', KEYS[6], marker, marker, 'COUNT', 1) == 0 then
    forget[#forget + 1] = member
  end
end
if #forget > 0 then redis.call('ZREM', KEYS[3], unpack(forget)) end
redis.call('RENAME', KEYS[6], KEYS[1])
redis.call('HSET', KEYS[2], 'cleaned', upto, 'swapped', string.format('%d', now),
           'cclean', kept)
redis.call('DEL', KEYS[4], KEYS[5])
redis.call('HSET', KEYS[7], 'expires', 0)
return {'SWAPPED', removed, kept, redis.call('XLEN', KEYS[1])}
