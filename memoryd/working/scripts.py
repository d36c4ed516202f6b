"""The Lua scripts of working memory: each operation one script, which Redis runs
atomically, so that any number of writers lose no update.

A thread's parts live under one hash tag, ``memoryd:wm:{<agent>:<thread>}:<part>``
(hashes of the ids, never the ids). No part has a TTL: Redis never drops a thread on its
own. Expiry is a score instead: ``due`` holds each live thread's deadline, and a sweep
*retires* the threads past it (their keys renamed under their generation, in one step)
and hands them to promotion; ``work`` holds what awaits promotion, scored by when a
promoter's claim on it lapses, so a promoter killed mid-way is replaced. Messages
trimmed from a live thread wait in its ``spill`` list, also listed in ``work``.

The scripts name keys they derive from their arguments: working memory needs one Redis
(a primary, with replicas if wanted), not a Redis Cluster."""

from __future__ import annotations

COMMON = """
local P = 'memoryd:wm:'
local PARTS = {'meta', 'msgs', 'vars', 'lru', 'flags', 'counters', 'spill'}
local function k(tag, part) return P .. tag .. ':' .. part end
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function push_all(key, values)
  for i = 1, #values, 500 do
    redis.call('RPUSH', key, unpack(values, i, math.min(i + 499, #values)))
  end
end
-- The thread's state; with ``pending``, also the messages on their way to long-term
-- memory (a list that grows while no worker promotes, so only for those who ask).
local function state(tag, pending)
  local spill = {}
  if pending then spill = redis.call('LRANGE', k(tag, 'spill'), 0, -1) end
  return {redis.call('HGETALL', k(tag, 'meta')), redis.call('LRANGE', k(tag, 'msgs'), 0, -1),
          redis.call('HGETALL', k(tag, 'vars')), redis.call('SMEMBERS', k(tag, 'flags')),
          redis.call('HGETALL', k(tag, 'counters')), spill}
end
local function threads_key(meta)
  return P .. 'threads:' .. redis.call('HGET', meta, 'agent_digest')
end
-- An access slides the deadline and counts.
local function touch(tag, now)
  local meta = k(tag, 'meta')
  local deadline = now + tonumber(redis.call('HGET', meta, 'ttl')) * 1000
  redis.call('HSET', meta, 'accessed', now, 'deadline', deadline)
  redis.call('HINCRBY', meta, 'access_count', 1)
  redis.call('ZADD', P .. 'due', deadline, tag)
  redis.call('ZADD', threads_key(meta), deadline, redis.call('HGET', meta, 'thread'))
end
local function awaits(tag, now, lease)
  redis.call('ZADD', P .. 'work', 'NX', now + lease * 1000, tag)
end
-- The live thread's keys renamed under its generation: a later update starts a new one.
local function retire(tag, now, lease)
  local meta = k(tag, 'meta')
  if redis.call('EXISTS', meta) == 0 then return false end
  redis.call('ZREM', P .. 'due', tag)
  redis.call('ZREM', threads_key(meta), redis.call('HGET', meta, 'thread'))
  local dest = tag .. ':' .. redis.call('HGET', meta, 'generation')
  for _, part in ipairs(PARTS) do
    if redis.call('EXISTS', k(tag, part)) == 1 then
      redis.call('RENAME', k(tag, part), k(dest, part))
    end
  end
  redis.call('ZREM', P .. 'work', tag)
  redis.call('ZADD', P .. 'work', now + lease * 1000, dest)
  return dest
end
"""

# ARGV: tag, 1 to include the pending messages. The state, or nil for no such thread
# (nothing is created).
GET = COMMON + """
local tag = ARGV[1]
if redis.call('EXISTS', k(tag, 'meta')) == 0 then return false end
touch(tag, now_ms())
return state(tag, ARGV[2] == '1')
"""

# ARGV: tag, the update (JSON), the thread's identity should it be new (JSON), the
# limits (JSON). Every refusal is decided before the first write.
UPDATE = COMMON + """
local tag = ARGV[1]
local p, c, lim = cjson.decode(ARGV[2]), cjson.decode(ARGV[3]), cjson.decode(ARGV[4])
local meta, msgs = k(tag, 'meta'), k(tag, 'msgs')
local version = tonumber(redis.call('HGET', meta, 'version') or '0')
if p.expected ~= nil and tonumber(p.expected) ~= version then
  return {'conflict', version}
end
local counters, flags = k(tag, 'counters'), k(tag, 'flags')
if p.incr then
  local fresh = 0
  for name, amount in pairs(p.incr) do
    local held = redis.call('HGET', counters, name)
    if not held then fresh = fresh + 1 end
    local value = tonumber(held or '0') + amount
    if value > lim.counter_bound or value < -lim.counter_bound then
      return {'refused', 'increment.' .. name, 'would leave the counter out of range'}
    end
  end
  if redis.call('HLEN', counters) + fresh > lim.max_counters then
    return {'refused', 'increment',
            'the thread would hold more than ' .. lim.max_counters .. ' counters'}
  end
end
if p.flag then
  local count = redis.call('SCARD', flags)
  for _, name in ipairs(p.flag) do
    if redis.call('SISMEMBER', flags, name) == 0 then count = count + 1 end
  end
  if count > lim.max_flags then
    return {'refused', 'set_flags',
            'the thread would hold more than ' .. lim.max_flags .. ' flags'}
  end
end
local now = now_ms()
if version == 0 then
  redis.call('HSET', meta, 'agent', c.agent, 'agent_digest', c.agent_digest, 'thread', c.thread,
             'generation', c.generation, 'created', now, 'ttl', c.ttl, 'seq', 0, 'tick', 0,
             'access_count', 0, 'promoted', 0)
end
for _, m in ipairs(p.messages or {}) do
  local seq = redis.call('HINCRBY', meta, 'seq', 1)
  redis.call('RPUSH', msgs, '{"seq":' .. seq .. ',"at":' .. now .. ',' .. string.sub(m, 2))
end
local spilled = 0
local n = redis.call('LLEN', msgs)
if n > lim.max_messages then
  local head = {}
  if lim.keep_first > 0 then head = redis.call('LRANGE', msgs, 0, lim.keep_first - 1) end
  local middle = redis.call('LRANGE', msgs, lim.keep_first, n - lim.keep_last - 1)
  local tail = redis.call('LRANGE', msgs, n - lim.keep_last, -1)
  -- The opening messages stay, and go to long-term memory now too (as copies, which the
  -- ledger keeps from being written twice), so that the session lists them first.
  if redis.call('HSETNX', meta, 'head_sent', 1) == 1 then push_all(k(tag, 'spill'), head) end
  push_all(k(tag, 'spill'), middle)
  redis.call('DEL', msgs)
  push_all(msgs, head)
  push_all(msgs, tail)
  spilled = #middle
  redis.call('HINCRBY', meta, 'promoted', spilled)
  awaits(tag, now, c.lease)
end
local vars, lru = k(tag, 'vars'), k(tag, 'lru')
for _, pair in ipairs(p.set or {}) do
  redis.call('HSET', vars, pair[1], pair[2])
  redis.call('ZADD', lru, redis.call('HINCRBY', meta, 'tick', 1), pair[1])
end
for _, name in ipairs(p.del or {}) do
  redis.call('HDEL', vars, name)
  redis.call('ZREM', lru, name)
end
local held = redis.call('HLEN', vars)
if held > lim.max_variables then
  local victims = redis.call('ZRANGE', lru, 0, held - lim.max_variables - 1)
  for _, name in ipairs(victims) do
    redis.call('HDEL', vars, name)
    redis.call('ZREM', lru, name)
  end
end
for _, name in ipairs(p.flag or {}) do redis.call('SADD', flags, name) end
for _, name in ipairs(p.unflag or {}) do redis.call('SREM', flags, name) end
for name, amount in pairs(p.incr or {}) do redis.call('HINCRBY', counters, name, amount) end
if p.topic == '' then redis.call('HDEL', meta, 'topic')
elseif p.topic then redis.call('HSET', meta, 'topic', p.topic) end
for _, field in ipairs({'entities', 'tools', 'importance', 'ttl'}) do
  if p[field] then redis.call('HSET', meta, field, p[field]) end
end
redis.call('HINCRBY', meta, 'version', 1)
touch(tag, now)
return {'ok', spilled, state(tag)}
"""

# ARGV: tag, lease (s). The thread emptied; its messages wait in its spill list.
CLEAR = COMMON + """
local tag, lease = ARGV[1], tonumber(ARGV[2])
local meta, msgs = k(tag, 'meta'), k(tag, 'msgs')
if redis.call('EXISTS', meta) == 0 then return false end
local now = now_ms()
local moved = redis.call('LRANGE', msgs, 0, -1)
if #moved > 0 then
  push_all(k(tag, 'spill'), moved)
  redis.call('HINCRBY', meta, 'promoted', #moved)
  awaits(tag, now, lease)
end
redis.call('DEL', msgs, k(tag, 'vars'), k(tag, 'lru'), k(tag, 'flags'), k(tag, 'counters'))
redis.call('HDEL', meta, 'topic', 'entities', 'tools')
redis.call('HINCRBY', meta, 'version', 1)
touch(tag, now)
return {#moved, state(tag)}
"""

# ARGV: tag. The thread's newest message removed and returned (nil: it holds none);
# a message that already went to long-term memory stays there.
POP = COMMON + """
local tag = ARGV[1]
local meta = k(tag, 'meta')
if redis.call('EXISTS', meta) == 0 then return false end
local popped = redis.call('RPOP', k(tag, 'msgs'))
if not popped then return false end
redis.call('HINCRBY', meta, 'version', 1)
touch(tag, now_ms())
return popped
"""

# ARGV: tag, lease (s). The retired thread's tag, or nil for no such thread.
RETIRE = COMMON + """
return retire(ARGV[1], now_ms(), tonumber(ARGV[2]))
"""

# ARGV: lease (s), batch. Retire the live threads past their deadline, renew the claims
# that lapsed; what the caller must now promote.
SWEEP = COMMON + """
local lease, batch = tonumber(ARGV[1]), tonumber(ARGV[2])
local now, out = now_ms(), {}
for _, tag in ipairs(redis.call('ZRANGEBYSCORE', P .. 'work', '-inf', now, 'LIMIT', 0, batch)) do
  redis.call('ZADD', P .. 'work', now + lease * 1000, tag)
  table.insert(out, tag)
end
for _, tag in ipairs(redis.call('ZRANGEBYSCORE', P .. 'due', '-inf', now, 'LIMIT', 0, batch)) do
  local dest = retire(tag, now, lease)
  if dest then table.insert(out, dest) else redis.call('ZREM', P .. 'due', tag) end
end
return out
"""

# ARGV: tag. What promotion reads: the meta, the spill list and the messages.
READ = COMMON + """
local tag = ARGV[1]
return {redis.call('HGETALL', k(tag, 'meta')), redis.call('LRANGE', k(tag, 'spill'), 0, -1),
        redis.call('LRANGE', k(tag, 'msgs'), 0, -1)}
"""

# ARGV: tag, the last spill entry promoted ('' for none), 1 if retired, the generation
# promoted. A retired thread is deleted; a live one loses its spill list up to that entry
# (later spills stay queued; a promoter that read less and acknowledged first already
# took the head), unless it is another generation by now (retired and started again).
ACK = COMMON + """
local tag, last, retired = ARGV[1], ARGV[2], ARGV[3] == '1'
if retired then
  for _, part in ipairs(PARTS) do redis.call('DEL', k(tag, part)) end
  redis.call('ZREM', P .. 'work', tag)
  return 1
end
if redis.call('HGET', k(tag, 'meta'), 'generation') ~= ARGV[4] then return 0 end
local spill = k(tag, 'spill')
if last ~= '' then
  local at = redis.call('LPOS', spill, last)
  if at then redis.call('LTRIM', spill, at + 1, -1) end
end
if redis.call('LLEN', spill) == 0 then redis.call('ZREM', P .. 'work', tag) end
return 0
"""
