-- A share group's state on one partition (DescribeShareGroupOffsets), or its reset
-- (AlterShareGroupOffsets) or removal (DeleteShareGroupOffsets), on the partition's Redis
-- consumer group (korvet/storage/shares.py).
-- KEYS[1] partition stream
-- ARGV[1] Redis group (share:<group id>)  ARGV[2] 'state', 'reset' or 'delete'
-- ARGV[3] (reset) the id the group restarts after: every record above it is available again,
--   every one at or below it terminal; what was in flight is dropped, as Kafka re-initialises
--   a share partition it alters
--
-- state: {} when the stream or the group is not there, else {last-delivered-id, pending
--   entries, the lowest pending id or '', lag (entries not delivered yet; -1: Redis cannot say)}
-- reset: 1 when done, 0 when the partition has no stream yet (nothing to start above)
-- delete: 1 when a group was removed, else 0
local stream, group, mode = KEYS[1], ARGV[1], ARGV[2]
if redis.call('EXISTS', stream) == 0 then
  if mode == 'state' then return {} end
  return 0
end
if mode == 'delete' then
  return redis.call('XGROUP', 'DESTROY', stream, group)
end
if mode == 'reset' then
  redis.call('XGROUP', 'DESTROY', stream, group)
  redis.call('XGROUP', 'CREATE', stream, group, ARGV[3])
  return 1
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
