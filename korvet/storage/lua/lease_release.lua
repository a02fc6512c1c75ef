-- Give a group's coordinator lease back at a clean stop, so another broker takes the
-- group at once. KEYS[1] the lease hash; ARGV[1] the token held. The token stays (the
-- next grant raises it); only the expiry is cleared.
if redis.call('HGET', KEYS[1], 'token') == ARGV[1] then
  redis.call('HSET', KEYS[1], 'expires', 0)
  return 1
end
return 0
