-- A transaction coordinator's step (korvet/core/transactions.py): the transactional id's
-- record is written only if it is still the version the step was decided on, so a step
-- is one atomic transition of the record (spec/Transactions.tla, coord[t]) whichever
-- broker runs it; a broker that raced another reads the record again.
--
-- KEYS[1] the record  {ks}:{txn:T}:state   hash: record (JSON), version
-- ARGV[1] the version read (0: no record)   ARGV[2] the new record's JSON ('' deletes it)
-- Returns the new version, or -1 when the record is no longer the version read.
local version = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
if version ~= tonumber(ARGV[1]) then
  return -1
end
if ARGV[2] == '' then
  redis.call('DEL', KEYS[1])
  return 0
end
redis.call('HSET', KEYS[1], 'record', ARGV[2], 'version', string.format('%d', version + 1))
return version + 1
