-- A consumer group's offsets of transactions (spec/Transactions.tla: the group as a
-- participant; korvet/storage/transactions.py TxnOffsetStore).
--
-- KEYS[1] {ks}:{group:G}:txn   hash:  <producer id>   the pending offsets of its open
--                                                      transaction (JSON: epoch, offsets,
--                                                      decided once its marker came)
--                                      e:<producer id> "<epoch> <coordinator epoch>" of its
--                                                      last marker here (an older entry: the
--                                                      epoch alone, coordinator epoch 0)
-- ARGV[1] 'write' | 'marker' | 'applied'
-- write   ARGV 2 producer id, 3 epoch, 4 the offsets (JSON list): TxnOffsetCommit. Refused
--         (BAD_EPOCH) below the epoch of the producer's last marker, so a write of a decided
--         transaction arriving after its marker never reopens it; UNAPPLIED while a decided
--         transaction of the producer is not yet applied to the group (the owner applies it
--         first). The offsets join the pending ones (a partition's latest wins).
-- marker  ARGV 2 producer id, 3 epoch, 4 COMMIT|ABORT, 5 transaction version, 6 coordinator
--         epoch: the marker's verdict as a partition's (append.lua): FENCED below the last
--         marker's coordinator epoch (under v1 a late marker of the previous transaction, at
--         the same epoch, would otherwise end the next one's offsets); applied when the epoch
--         is above the last marker's (under v1 also equal while offsets are pending), DUP for
--         the same marker again, BAD_EPOCH below. Applied, the pending offsets are marked
--         decided.
-- applied ARGV 2 producer id, 3 the pending entry as read: the group's owner applied it
--         (committed its offsets, or dropped them), so it goes, unless it changed since.
local txn = KEYS[1]
local op = ARGV[1]
local pid = ARGV[2]
if op == 'applied' then
  if redis.call('HGET', txn, pid) == ARGV[3] then
    redis.call('HDEL', txn, pid)
    return 'OK'
  end
  return 'CHANGED'
end
local epoch = tonumber(ARGV[3])
local mark = redis.call('HGET', txn, 'e:' .. pid) or '-1'
local last = tonumber(string.match(mark, '^(%S+)'))
local last_ce = tonumber(string.match(mark, '^%S+ (%S+)') or '0')
local stored = redis.call('HGET', txn, pid)
local pending = stored and cjson.decode(stored) or nil
if op == 'write' then
  if epoch < last then
    return 'BAD_EPOCH'
  end
  if pending and pending['decided'] then
    return 'UNAPPLIED'
  end
  if pending == nil or pending['epoch'] ~= epoch then
    pending = {epoch = epoch, offsets = {}}
  end
  local index = {}
  for i, o in ipairs(pending['offsets']) do
    index[o[1] .. '\0' .. o[2]] = i
  end
  for _, o in ipairs(cjson.decode(ARGV[4])) do
    local key = o[1] .. '\0' .. o[2]
    if index[key] then
      pending['offsets'][index[key]] = o
    else
      pending['offsets'][#pending['offsets'] + 1] = o
      index[key] = #pending['offsets']
    end
  end
  redis.call('HSET', txn, pid, cjson.encode(pending))
  return 'OK'
end
-- marker
local v2 = ARGV[5] == '2'
local open = pending ~= nil and not pending['decided']
local ce = tonumber(ARGV[6])
if ce < last_ce then
  return 'FENCED'
end
if epoch < last then
  return 'BAD_EPOCH'
end
if epoch == last and not (open and not v2) then
  return 'DUP'
end
redis.call('HSET', txn, 'e:' .. pid, string.format('%d %d', epoch, ce))
if open then
  pending['decided'] = ARGV[4]
  redis.call('HSET', txn, pid, cjson.encode(pending))
end
return 'OK'
