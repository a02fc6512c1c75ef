-- A share group's state on one partition (DescribeShareGroupOffsets), or its reset
-- (AlterShareGroupOffsets) or removal (DeleteShareGroupOffsets), on the partition's Redis
-- consumer group (korvet/storage/shares.py).
-- KEYS[1] partition stream  KEYS[2] partition meta hash
-- ARGV[1] Redis group (share:<group id>)  ARGV[2] 'state', 'reset' or 'delete'
-- ARGV[3] (reset) the id the group restarts after: every record above it is available again,
--   every one at or below it terminal; what was in flight is dropped, as Kafka re-initialises
--   a share partition it alters
--
-- state: {} when the stream or the group is not there, else {last-delivered-id, pending
--   entries, the lowest pending id or '', lag (entries not delivered yet; -1: Redis cannot say)};
--   on a partition with no stream yet, a reset's mark reads as a group at that id
--   (AlterShareGroupOffsets then DescribeShareGroupOffsets shows the offset set, as Kafka)
-- reset: 1 (on a partition with no stream yet, the start is kept as share_fetch.lua's mark,
--   `share-start:<group>` in the meta hash, for the group's creation)
-- delete: 1 when a group (or a mark) was removed, else 0
local stream, meta, group, mode = KEYS[1], KEYS[2], ARGV[1], ARGV[2]
local mark = 'share-start:' .. group
if mode == 'delete' then
  local marked = redis.call('HDEL', meta, mark)
  if redis.call('EXISTS', stream) == 0 then return marked end
  return math.max(redis.call('XGROUP', 'DESTROY', stream, group), marked)
end
if mode == 'reset' then
  redis.call('HDEL', meta, mark)
  if redis.call('EXISTS', stream) == 0 then
    redis.call('HSET', meta, mark, ARGV[3])
    return 1
  end
  redis.call('XGROUP', 'DESTROY', stream, group)
  redis.call('XGROUP', 'CREATE', stream, group, ARGV[3])
  return 1
end
if redis.call('EXISTS', stream) == 0 then
  local marked = redis.call('HGET', meta, mark)
  if marked then return {marked, 0, '', 0} end
  return {}
end
local groups = redis.call('XINFO', 'GROUPS', stream)
for _, info in ipairs(groups) do
  local fields = {}
  for i = 1, #info, 2 do fields[info[i]] = info[i + 1] end
  if fields['name'] == group then
    local lowest = ''
    if tonumber(fields['pending']) > 0 then
      lowest = redis.call('XPENDING', stream, group)[2]
    end
    local lag = fields['lag']
    if type(lag) ~= 'number' then lag = -1 end
    return {fields['last-delivered-id'], tonumber(fields['pending']), lowest, lag}
  end
end
return {}
