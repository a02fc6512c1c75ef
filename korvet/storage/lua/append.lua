-- Korvet's atomic append: one call per produced record batch.
--
-- Two offset schemes (korvet.offset.scheme). `time` below; `dense` (ARGV 2, the sequence bits,
-- is 0: spec/DenseLog.tla) hands out last + 1, last + 2, ... from offset 0, with no clock floor,
-- and writes offset o at the id o-1 (Redis refuses 0-0). The arithmetic below is the same for
-- both: it works on (ms, seq) pairs with seq in 0 .. 2^bits - 1 (for dense: 0, as 2^0 = 1),
-- and the ids it writes and reads carry the sequence plus `bias` (1 for dense, else 0). Its
-- reply gives those pairs (offset = ms * 2^bits + seq: for dense, ms).
--
-- Mirrors korvet.core.offsets.OffsetCodec.reserve (spec/OffsetCodec.tla, actions AppendBatch
-- and RejectBatch):
-- the batch's n records get the consecutive offsets starting at
-- max(last + 1, encode(now, 0)), where offset = ms * 2^bits + seq, and are XADDed with
-- the explicit entry ids those offsets decode to. Lua numbers are doubles, so the script
-- never forms an offset (up to 2^63): it works on (ms, seq) pairs with an explicit carry.
-- Because the whole script runs atomically in Redis, several broker processes can
-- append to one partition and still produce strictly increasing, consecutive offsets.
--
-- KEYS[1] partition stream     {ks}:{topic:partition}:stream
-- KEYS[2] partition meta hash  {ks}:{topic:partition}:partition
--         fields: last (id of the last offset handed out), start (log start id),
--                 p:<producer id> (idempotent producer state)
-- KEYS[3] topic stamp          the meta hash again: `id`, `partitions` (stamp_partition.lua)
-- KEYS[4] waiting mark         {ks}:{topic:partition}:waiting (set while a fetch waits for this stream)
-- ARGV  1 now (ms)          2 sequence bits     3 partition index   4 topic id
--       5 min id ms (-1)    6 max len (-1)      7 approximate trim (1/0)
--       8 producer id (-1)  9 producer epoch   10 base sequence (-1) 11 last sequence
--      12 record count n   13 notify channel ("" = none)
--      14 the layout of the entries' arguments that follow, by the topic's
--         korvet.storage.format (storage/entries.py):
--           records, one entry per offset, with the fields timestamp, [key], [value],
--           [header.<name>...] (entries.entry_fields); per record:
--             'values': timestamp, value        (no key, a value, no header)
--             'keyed':  timestamp, key, value   (a key, a value, no header)
--             'fields': k, then the 2k field/value arguments (any record)
--           batches: 'batch', then k and the 2k field/value arguments of the one entry that
--                    holds the whole batch at its first offset; its first field is 'records',
--                    the count n (entries.pack_batch)
--
-- KEYS[5] the time index of a dense topic {ks}:{topic:partition}:times (absent for time topics)
-- A dense topic's append carries three more arguments after the records (the trailer):
--   the index interval (the topic's index.interval.bytes), the Redis life the broker's
--   connection talks to (the server's run_id) and the clock, in seconds from 2024, from which
--   that life's epochs are numbered (storage/pipe.py `Life`).
--
-- The partition epoch of a dense topic (spec/DenseLog.tla, Kafka's leader epoch): the meta
-- hash keeps `epoch`, `inc` (the life that set it) and `epochs` (the history, "epoch:start"
-- pairs, the start being the epoch's first offset). A new partition starts at epoch
-- max(0, clock); the first append of another Redis life (Redis restarted, failed over or was
-- restored: its last writes may be gone and their offsets handed out again) starts epoch
-- max(epoch + 1, clock) at its first offset, so a consumer that read past the cut sees it
-- (KIP-320). Epochs go with the writes that start them, in one script call: a Redis that
-- loses the one loses the other.
--
-- The time index of a dense topic (spec/DenseLog.tla `times`): the meta hash keeps `tmax`, the
-- largest record timestamp ever appended, and `since`, the bytes appended since the last
-- checkpoint; once `since` reaches the interval, a checkpoint `<last + 1>-0  t <tmax>` says
-- that every record below offset last + 1 has a timestamp at most tmax. Retention by time
-- (ARGV 5, the cutoff now - retention.ms) removes the records below the end of the last
-- checkpoint older than the cutoff, as Kafka removes segments whose largest timestamp is
-- older; ListOffsets by time searches the checkpoints (time_search.lua).
--
-- Transactions (spec/Transactions.tla; korvet/core/transactions.py). A transactional append
-- names three more keys: KEYS[5] (the time index; unused by a time topic), KEYS[6] the
-- partition's open transactions {ks}:{topic:partition}:open (sorted set: producer id, scored
-- by the millisecond of its first offset) and KEYS[7] its aborted index
-- {ks}:{topic:partition}:aborted (sorted set: "<producer id> <first id> <marker id>",
-- scored by the marker's millisecond). The meta hash keeps per producer id in a
-- transaction `t:<producer id>` = "<epoch of its last marker> <coordinator epoch of it>
-- <first ms> <first seq>" (first -1 -1: none open) and `lso`, the id of the first offset of
-- the oldest open transaction (absent: none; the last stable offset is then the high
-- watermark).
--   A data batch (ARGV 10 >= 0) is checked as an idempotent one, and its epoch against the
--   producer's there, which every marker raises: a write of a decided transaction that
--   arrives after its marker is refused (BAD_EPOCH), in the same step that would append it.
--   The producer's first batch opens its transaction at its first offset.
--   A marker (ARGV 10 = -2, ARGV 11 = "<COMMIT|ABORT> <coordinator epoch> <transaction
--   version>") is one control entry at the next offset: refused (FENCED) below the last
--   marker's coordinator epoch; applied when its epoch is above the producer's (under
--   transactions v1 also at the same epoch while a transaction is open); the same marker
--   again answers DUP and writes nothing. Applied, it ends the open transaction, an abort
--   entering the aborted index, and moves `lso`.
--
-- Returns {status, a_ms, a_seq, b_ms, b_seq, start_ms, start_seq}:
--   'OK'   a = first id, b = last id of the batch
--   'DUP'  a = first id of the identical batch appended before (nothing written)
--   'NO_TOPIC' | 'NO_PARTITION' | 'OUT_OF_ORDER' | 'BAD_EPOCH'   (nothing written)
--   'FULL'  the batch would pass the last offset, 2^63 - 1 (RejectBatch; nothing written)

-- Offsets are signed 64-bit integers. (The state-graph replays of spec/PartitionLog.tla and
-- spec/ProducerState.tla run this script with these two lines narrowed to the model's widths.)
local OFFSET_BITS = 63
local CACHED_BATCHES = 5  -- batches remembered per idempotent producer (Kafka: 5)

local now = tonumber(ARGV[1])
local bits = tonumber(ARGV[2])
local limit = 2 ^ bits
-- The first millisecond whose offsets do not fit: a power of two, so exact as a double (the last
-- millisecond that fits, 2^(63 - bits) - 1, is not for bits < 10 and rounded up to this one). A
-- clock at or past it counts as the last millisecond that fits.
local ms_end = 2 ^ (OFFSET_BITS - bits)
if now >= ms_end then
  now = ms_end - 1
end
local partition = tonumber(ARGV[3])
local topic_id = ARGV[4]
local min_id_ms = tonumber(ARGV[5])
local max_len = tonumber(ARGV[6])
local approximate = ARGV[7] == '1'
local pid = ARGV[8]
local epoch = tonumber(ARGV[9])
local base_seq = tonumber(ARGV[10])
local last_seq = tonumber(ARGV[11]) or -1
local n = tonumber(ARGV[12])
local channel = ARGV[13]
local layout = ARGV[14]
local batch_entry = layout == 'batch'
local dense = bits == 0
local bias = dense and 1 or 0
local marker = base_seq == -2
local transactional = #KEYS >= 7 and not marker

local topic = redis.call('HMGET', KEYS[3], 'id', 'partitions')
if topic[1] == false or topic[1] ~= topic_id then
  return {'NO_TOPIC', 0, 0, 0, 0, 0, 0}
end
if partition >= tonumber(topic[2]) then
  return {'NO_PARTITION', 0, 0, 0, 0, 0, 0}
end

local function split_id(id)
  local dash = string.find(id, '-', 1, true)
  return tonumber(string.sub(id, 1, dash - 1)), tonumber(string.sub(id, dash + 1)) - bias
end

local function fmt(ms, seq)
  return string.format('%d-%d', ms, seq + bias)
end

-- The id `count` offsets after (ms, seq), carrying into the next milliseconds.
local function advance(ms, seq, count)
  local s = seq + count
  return ms + math.floor(s / limit), s % limit
end

-- A dense topic's epoch and time index state come in the same call (used below).
local meta = dense and redis.call('HMGET', KEYS[2], 'last', 'start', 'epoch', 'inc', 'epochs',
                                  'tmax', 'since')
                   or redis.call('HMGET', KEYS[2], 'last', 'start')
-- The log start offset: the first offset not removed by retention. A log that never had an
-- entry starts at its first batch (set below), so ListOffsets EARLIEST and the lag tools count
-- from the first record, as with Kafka. bounds.lua gives an empty partition a start too.
-- An id wider than bits (XADD *) has no offset: the log start is then the first id after it.
local function norm(ms, seq)
  if seq >= limit then
    return ms + 1, 0
  end
  return ms, seq
end

local start_ms, start_seq = nil, nil
if meta[2] then
  start_ms, start_seq = split_id(meta[2])
else
  local first = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', 1)
  if #first > 0 then
    start_ms, start_seq = norm(split_id(first[1][1]))
  end
end

-- Idempotent producer (Kafka's ProducerStateManager rules, last 5 batches cached).
local pstate_field = nil
local pstate = nil
if pid ~= '-1' and base_seq >= 0 then
  pstate_field = 'p:' .. pid
  local stored = redis.call('HGET', KEYS[2], pstate_field)
  if stored then
    pstate = {}
    for token in string.gmatch(stored, '%S+') do
      pstate[#pstate + 1] = tonumber(token)
    end
    -- pstate = {epoch, last_seq, touched_ms, [first_seq, last_seq, ms, seq] x up to 5}
    local stored_epoch = pstate[1]
    if epoch < stored_epoch then
      return {'BAD_EPOCH', 0, 0, 0, 0, start_ms or 0, start_seq or 0}
    end
    if epoch == stored_epoch then
      local i = 4
      while pstate[i] do
        if pstate[i] == base_seq and pstate[i + 1] == last_seq then
          return {'DUP', pstate[i + 2], pstate[i + 3], 0, 0, start_ms or 0, start_seq or 0}
        end
        i = i + 4
      end
      local expected = pstate[2] + 1
      if pstate[2] == 2147483647 then expected = 0 end
      if base_seq ~= expected then
        return {'OUT_OF_ORDER', 0, 0, 0, 0, start_ms or 0, start_seq or 0}
      end
    elseif base_seq ~= 0 then
      return {'OUT_OF_ORDER', 0, 0, 0, 0, start_ms or 0, start_seq or 0}
    end
  end
end

-- Transactions: the producer's transaction state here, and a marker's verdict.
local tstate_field, tstate = nil, nil
local mark_result, mark_ce, mark_v2 = nil, nil, nil
if transactional or marker then
  tstate_field = 't:' .. pid
  tstate = {-1, 0, -1, -1}
  local stored = redis.call('HGET', KEYS[2], tstate_field)
  if stored then
    local i = 0
    for token in string.gmatch(stored, '%S+') do
      i = i + 1
      tstate[i] = tonumber(token)
    end
  end
end
if marker then
  local words = {}
  for token in string.gmatch(ARGV[11], '%S+') do
    words[#words + 1] = token
  end
  mark_result, mark_ce, mark_v2 = words[1], tonumber(words[2]), words[3] == '2'
  local stored = redis.call('HGET', KEYS[2], 'p:' .. pid)
  local data_epoch = -1
  if stored then
    data_epoch = tonumber(string.match(stored, '^(%S+)'))
  end
  local open = tstate[3] >= 0
  if mark_ce < tstate[2] then
    return {'FENCED', 0, 0, 0, 0, start_ms or 0, start_seq or 0}
  end
  if epoch < data_epoch then
    return {'BAD_EPOCH', 0, 0, 0, 0, start_ms or 0, start_seq or 0}
  end
  if epoch == data_epoch and not (open and not mark_v2) then
    if tstate[1] == epoch or not mark_v2 then
      return {'DUP', 0, 0, 0, 0, start_ms or 0, start_seq or 0}
    end
    return {'BAD_EPOCH', 0, 0, 0, 0, start_ms or 0, start_seq or 0}
  end
end

-- Reserve: first = max(last + 1, (now, 0), log start), carrying into the next millisecond.
-- `last` is the meta hash's copy of the last id this script wrote. A new stream's
-- last-generated id is 0-0 (offset 0), so offset 0 is never handed out: Redis refuses 0-0.
-- The log start matters when bounds.lua gave an empty partition its start at another broker's
-- later clock: no offset below a position a client was already told is handed out.
local function stream_last_id()
  -- Redis' own last-generated id: covers entries something else wrote (XADD *).
  local info = redis.call('XINFO', 'STREAM', KEYS[1])
  for i = 1, #info, 2 do
    if info[i] == 'last-generated-id' then
      return split_id(info[i + 1])
    end
  end
  return 0, -bias
end

-- Before anything: the offset before the first one (time: 0, never handed out; dense: -1, so
-- the first record is offset 0).
local last_ms, last_seq_id = 0, 0
if dense then
  last_ms = -1
end
if meta[1] then
  last_ms, last_seq_id = split_id(meta[1])
elseif redis.call('EXISTS', KEYS[1]) == 1 then
  last_ms, last_seq_id = stream_last_id()
end

local function first_after(l_ms, l_seq)
  local f_ms, f_seq = l_ms, l_seq + 1
  if f_seq >= limit then  -- also an id wider than bits (XADD *): the next millisecond
    f_ms, f_seq = f_ms + 1, 0
  end
  if not dense and f_ms < now then
    f_ms, f_seq = now, 0
  end
  if start_ms ~= nil and (f_ms < start_ms or (f_ms == start_ms and f_seq < start_seq)) then
    f_ms, f_seq = start_ms, start_seq
  end
  return f_ms, f_seq
end

local function full_reply(s_ms, s_seq)
  return {'FULL', 0, 0, 0, 0, s_ms, s_seq}
end

local ms, seq = first_after(last_ms, last_seq_id)
if ms + math.floor((seq + n - 1) / limit) >= ms_end then
  return full_reply(start_ms or ms, start_seq or seq)
end
-- The first entry's fields, and where the next record's arguments start.
local fields, j
if layout == 'values' then
  fields, j = {'timestamp', ARGV[15], 'value', ARGV[16]}, 17
elseif layout == 'keyed' then
  fields, j = {'timestamp', ARGV[15], 'key', ARGV[16], 'value', ARGV[17]}, 18
else  -- 'fields', 'batch'
  local k = tonumber(ARGV[15])
  fields, j = {unpack(ARGV, 16, 15 + 2 * k)}, 16 + 2 * k
end
local added = redis.pcall('XADD', KEYS[1], fmt(ms, seq), unpack(fields))
if type(added) == 'table' and added.err then
  if string.find(added.err, 'maxmemory', 1, true) or string.find(added.err, 'OOM', 1, true) then
    -- Redis is full (noeviction at maxmemory): nothing was written; the broker answers
    -- KAFKA_STORAGE_ERROR (a retriable error) and its memory watch reports it.
    return redis.error_reply(added.err)
  end
  -- Refused as not above the stream's top: something else (XADD *) wrote past `last`. Continue
  -- from Redis' own last-generated id instead (nothing was written yet).
  last_ms, last_seq_id = stream_last_id()
  ms, seq = first_after(last_ms, last_seq_id)
  if ms + math.floor((seq + n - 1) / limit) >= ms_end then
    return full_reply(start_ms or ms, start_seq or seq)
  end
  redis.call('XADD', KEYS[1], fmt(ms, seq), unpack(fields))
end

local first_ms, first_seq = ms, seq
if start_ms == nil then
  start_ms, start_seq = first_ms, first_seq
end
if batch_entry then
  -- One entry holds the batch: its n offsets are reserved all the same, the last is n - 1 on.
  last_ms, last_seq_id = advance(ms, seq, n - 1)
else
  -- The other records, one entry each at the next ids: the per-record work of the records
  -- format, so the loop is written out per layout (the field names are constants; the id is
  -- the millisecond's prefix and the sequence, below 2^22, which Lua prints exactly).
  local stream = KEYS[1]
  local prefix = string.format('%d-', ms)
  if layout == 'values' then
    for _ = 2, n do
      seq = seq + 1
      if seq >= limit then
        ms, seq = ms + 1, 0
        prefix = string.format('%d-', ms)
      end
      redis.call('XADD', stream, prefix .. (seq + bias), 'timestamp', ARGV[j], 'value', ARGV[j + 1])
      j = j + 2
    end
  elseif layout == 'keyed' then
    for _ = 2, n do
      seq = seq + 1
      if seq >= limit then
        ms, seq = ms + 1, 0
        prefix = string.format('%d-', ms)
      end
      redis.call('XADD', stream, prefix .. (seq + bias), 'timestamp', ARGV[j], 'key', ARGV[j + 1],
                 'value', ARGV[j + 2])
      j = j + 3
    end
  else
    for _ = 2, n do
      seq = seq + 1
      if seq >= limit then
        ms, seq = ms + 1, 0
        prefix = string.format('%d-', ms)
      end
      local k = tonumber(ARGV[j])
      redis.call('XADD', stream, prefix .. (seq + bias), unpack(ARGV, j + 1, j + 2 * k))
      j = j + 1 + 2 * k
    end
  end
  last_ms, last_seq_id = ms, seq
end
local last_id = fmt(last_ms, last_seq_id)

-- Retention at write time. Exact trimming records the first offset not removed
-- (one past the last removed entry), so a consumer positioned in the gap after the
-- removed entries is not told its offset is out of range.
local function after(a, b)
  b = b + 1
  if b >= limit then a, b = a + 1, 0 end
  return a, b
end

-- The id of an entry's last offset: its own id, or for a batch entry (a first field
-- 'records' with the count) the id count - 1 offsets on.
local function entry_last(entry)
  local a, b = split_id(entry[1])
  local fields = entry[2]
  if batch_entry and fields[1] == 'records' then
    return advance(a, b, tonumber(fields[2]) - 1)
  end
  return a, b
end

local function raise_start(ms_, seq_)
  if ms_ > start_ms or (ms_ == start_ms and seq_ > start_seq) then
    start_ms, start_seq = ms_, seq_
  end
end

-- Time retention (MINID). Cheap in the common case: when the log already starts at or after
-- the bound, nothing is read. (An XREVRANGE that finds no entry below its bound walks the
-- whole stream in Redis 7.0, so the last removed entry is only looked for once a forward
-- read has shown that entries below the bound exist.)
local function id_less(a_ms, a_seq, b_ms, b_seq)
  return a_ms < b_ms or (a_ms == b_ms and a_seq < b_seq)
end

-- A dense topic's batch: its largest record timestamp and its bytes (keys, values, a stored
-- batch), read off the arguments; and where the trailer starts.
local function batch_stats()
  local max_ts, bytes = -1, 0
  if batch_entry then
    local k = tonumber(ARGV[15])
    for i = 16, 15 + 2 * k, 2 do
      if ARGV[i] == 'max-timestamp' then
        max_ts = tonumber(ARGV[i + 1])
      end
      bytes = bytes + #ARGV[i + 1]
    end
    return max_ts, bytes, 16 + 2 * k
  end
  local i = 15
  for _ = 1, n do
    local ts
    if layout == 'values' then
      ts, bytes, i = tonumber(ARGV[i]), bytes + #ARGV[i + 1], i + 2
    elseif layout == 'keyed' then
      ts, bytes, i = tonumber(ARGV[i]), bytes + #ARGV[i + 1] + #ARGV[i + 2], i + 3
    else
      local k = tonumber(ARGV[i])
      for f = i + 1, i + 2 * k, 2 do
        if ARGV[f] == 'timestamp' then
          ts = tonumber(ARGV[f + 1])
        end
        bytes = bytes + #ARGV[f + 1]
      end
      i = i + 1 + 2 * k
    end
    if ts ~= nil and ts > max_ts then
      max_ts = ts
    end
  end
  return max_ts, bytes, i
end

local tmax, since = nil, nil
if dense then
  local max_ts, bytes, trailer = batch_stats()
  local interval = tonumber(ARGV[trailer]) or 4096
  local life, clock = ARGV[trailer + 1] or '', tonumber(ARGV[trailer + 2]) or 0
  local known = {meta[3], meta[4], meta[5]}  -- epoch, inc, epochs
  local epoch = tonumber(known[1])
  if epoch == nil or known[2] ~= life then
    epoch = epoch == nil and math.max(0, clock) or math.max(epoch + 1, clock)
    local history = string.format('%d:%d', epoch, first_ms)
    if known[3] then
      history = known[3] .. ' ' .. history
    end
    redis.call('HSET', KEYS[2], 'epoch', string.format('%d', epoch), 'inc', life,
               'epochs', history)
  end
  tmax = math.max(tonumber(meta[6]) or -1, max_ts)
  since = (tonumber(meta[7]) or 0) + bytes
  if since >= interval then
    redis.call('XADD', KEYS[5], string.format('%d-0', last_ms + 1), 't', string.format('%d', tmax))
    since = 0
  end
  -- Retention by time: the checkpoints wholly older than the cutoff are the index's first ones.
  if min_id_ms >= 0 then
    local boundary = nil
    while true do
      local c = redis.call('XRANGE', KEYS[5], '-', '+', 'COUNT', 1)[1]
      if c == nil or tonumber(c[2][2]) >= min_id_ms then
        break
      end
      boundary = split_id(c[1])
      redis.call('XDEL', KEYS[5], c[1])
    end
    if boundary ~= nil and boundary > start_ms then
      redis.call('XTRIM', KEYS[1], 'MINID', fmt(boundary, 0))
      start_ms, start_seq = boundary, 0
    end
  end
end

local trimmed = false
-- A dense topic's entry ids are offsets, not times: its retention by time is the index's, above.
if not dense and min_id_ms >= 0 and id_less(start_ms, start_seq, min_id_ms, 0) then
  local min_id = fmt(min_id_ms, 0)
  if id_less(last_ms, last_seq_id, min_id_ms, 0) then
    -- every entry expired: the log starts after the last offset handed out
    redis.call('XTRIM', KEYS[1], 'MINID', min_id)
    raise_start(after(last_ms, last_seq_id))
  elseif approximate then
    trimmed = redis.call('XTRIM', KEYS[1], 'MINID', '~', min_id) > 0 or trimmed
  else
    local first = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', 1)
    local first_ms, first_seq
    if #first > 0 then
      first_ms, first_seq = split_id(first[1][1])
    end
    if first_ms ~= nil and id_less(first_ms, first_seq, min_id_ms, 0) then
      local below = redis.call('XREVRANGE', KEYS[1], '(' .. min_id, '-', 'COUNT', 1)
      local b_ms, b_seq = entry_last(below[1])
      if id_less(b_ms, b_seq, min_id_ms, 0) then
        redis.call('XTRIM', KEYS[1], 'MINID', min_id)
        raise_start(after(b_ms, b_seq))
      elseif below[1][1] ~= first[1][1] then
        -- A batch entry that starts below the bound and ends at or past it stays whole (its
        -- records at or past the bound are not expired); the entries before it go.
        local before = redis.call('XREVRANGE', KEYS[1], '(' .. below[1][1], '-', 'COUNT', 1)
        redis.call('XTRIM', KEYS[1], 'MINID', below[1][1])
        raise_start(after(entry_last(before[1])))
      end
    end
  end
end
if max_len >= 0 then
  if approximate then
    trimmed = redis.call('XTRIM', KEYS[1], 'MAXLEN', '~', max_len) > 0 or trimmed
  else
    local excess = redis.call('XLEN', KEYS[1]) - max_len
    if excess > 0 then
      local removed = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', excess)
      redis.call('XTRIM', KEYS[1], 'MAXLEN', max_len)
      raise_start(after(entry_last(removed[#removed])))
    end
  end
end
if trimmed then
  local first = redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', 1)
  if #first > 0 then
    raise_start(norm(split_id(first[1][1])))
  else
    raise_start(after(last_ms, last_seq_id))
  end
end

local new_start = fmt(start_ms, start_seq)
if dense then
  redis.call('HSET', KEYS[2], 'last', last_id, 'start', new_start,
             'tmax', string.format('%d', tmax), 'since', string.format('%d', since))
  -- checkpoints that end at or below the log start say nothing of the records left; every
  -- move of the start drops them (here and in delete_records.lua), so only a move here does
  if new_start ~= meta[2] then
    redis.call('XTRIM', KEYS[5], 'MINID', string.format('%d-0', start_ms + 1))
  end
else
  redis.call('HSET', KEYS[2], 'last', last_id, 'start', new_start)
end

if pstate_field then
  local entry = {epoch, last_seq, now}
  local cached = {base_seq, last_seq, first_ms, first_seq}
  if pstate and pstate[1] == epoch then
    local i = 4
    while pstate[i] do
      cached[#cached + 1] = pstate[i]
      cached[#cached + 1] = pstate[i + 1]
      cached[#cached + 1] = pstate[i + 2]
      cached[#cached + 1] = pstate[i + 3]
      i = i + 4
    end
  end
  for i = 1, math.min(#cached, 4 * CACHED_BATCHES) do
    entry[#entry + 1] = cached[i]
  end
  local parts = {}
  for i = 1, #entry do
    parts[i] = string.format('%d', entry[i])
  end
  redis.call('HSET', KEYS[2], pstate_field, table.concat(parts, ' '))
end

-- The oldest open transaction's first id: `lso`, recomputed from the open set.
local function oldest_open()
  local low = redis.call('ZRANGE', KEYS[6], 0, 0, 'WITHSCORES')
  if #low == 0 then
    redis.call('HDEL', KEYS[2], 'lso')
    return
  end
  local best_ms, best_seq = nil, nil
  for _, member in ipairs(redis.call('ZRANGEBYSCORE', KEYS[6], low[2], low[2])) do
    local t = redis.call('HGET', KEYS[2], 't:' .. member)
    local a, b = string.match(t or '', '^%S+ %S+ (%S+) (%S+)$')
    a, b = tonumber(a), tonumber(b)
    if a and (best_ms == nil or id_less(a, b, best_ms, best_seq)) then
      best_ms, best_seq = a, b
    end
  end
  if best_ms == nil then
    redis.call('HDEL', KEYS[2], 'lso')
  else
    redis.call('HSET', KEYS[2], 'lso', fmt(best_ms, best_seq))
  end
end

if transactional and tstate[3] < 0 then
  -- the producer's first batch of its transaction here opens it
  redis.call('HSET', KEYS[2], tstate_field, string.format('%d %d %d %d', tstate[1], tstate[2],
                                                          first_ms, first_seq))
  redis.call('ZADD', KEYS[6], first_ms, pid)
  if redis.call('HEXISTS', KEYS[2], 'lso') == 0 then
    redis.call('HSET', KEYS[2], 'lso', fmt(first_ms, first_seq))
  end
elseif marker then
  local open = tstate[3] >= 0
  redis.call('HSET', KEYS[2], tstate_field, string.format('%d %d -1 -1', epoch, mark_ce))
  -- the next transaction's first batch starts its sequences anew at the marker's epoch
  local stored = redis.call('HGET', KEYS[2], 'p:' .. pid)
  if stored == false or tonumber(string.match(stored, '^(%S+)')) < epoch then
    redis.call('HSET', KEYS[2], 'p:' .. pid, string.format('%d -1 %d', epoch, now))
  end
  if open then
    redis.call('ZREM', KEYS[6], pid)
    if mark_result == 'ABORT' then
      redis.call('ZADD', KEYS[7], first_ms, string.format('%s %s %s', pid,
                 fmt(tstate[3], tstate[4]), fmt(first_ms, first_seq)))
    end
    oldest_open()
  end
end
if (transactional or marker) and start_ms ~= nil then
  -- aborted transactions wholly below the log start are of no reader's concern
  redis.call('ZREMRANGEBYSCORE', KEYS[7], '-inf', '(' .. string.format('%d', start_ms))
end

-- Announce the append only when some broker has a fetch waiting for this stream: the
-- others would only receive and drop the message.
if channel ~= '' and redis.call('EXISTS', KEYS[4]) == 1 then
  redis.call('PUBLISH', channel, KEYS[1])
end

return {'OK', first_ms, first_seq, last_ms, last_seq_id, start_ms, start_seq}
