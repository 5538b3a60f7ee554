package redis

// Every state transition of the store is one of the Lua scripts below, run atomically by the server
// (functions of one library, FCALL, loaded once; the first call that finds the library missing
// after a restart or failover loads it again: see lua.go). No transition reads a job in Go and
// writes it back.
//
// A queue script gets KEYS[1], the queue's key prefix "<prefix>{<tag>}:", and builds the queue's
// other keys from it: every key it touches carries the queue's hash tag, so it touches one cluster
// slot. The keys of one queue (B below):
//
//	B.."j:"..id      hash   one job (fields: see encode.go)
//	B.."st:"..state  zset   ids of the queue's jobs in that state, all scored 0 (lexical = id order)
//	B.."k:"..kind    zset   available jobs of that kind, scored 0, member rank(prio, due)..id
//	B.."kinds"       set    kinds that have had available jobs
//	B.."sched"       zset   scheduled and retryable jobs by due time (µs)
//	B.."lease"       zset   active jobs by lease end (µs)
//	B.."exp"         zset   not-started jobs with an expiry, by expiry (µs)
//	B.."done:"..st   zset   terminal jobs of state st by completion time (µs), for retention
//	B.."paused"      string present while the queue is paused
//	B.."wf:"..id     hash   a workflow whose jobs are all in this queue (see wfbase)
//	B.."wfj:"..id    zset   its job ids, scored 0
//
// Beside them, on a single node, global keys (G below) that span queues, among them
// G.."tj:"..state..":"..tenant, a zset of the tenant's jobs in that state across queues, scored 0
// (lexical = id order), for ListJobs by tenant (tenant.go), kept by place and unplace from the job's
// tng field. On a Redis Cluster a job carries tnq instead, and the same counts and sets are kept per
// queue (B.."tc:"..tenant, B.."tenants", B.."tjs:"..state..":"..tenant), which tenant.go sums and
// merges across queues; B.."tw" is the queue's copy of the tenant weights, which tenant.go keeps.
//
// Times are microseconds since the Unix epoch, from the server's clock (TIME), so every process
// agrees on "now" as they agree on PostgreSQL's now().

// preludeBody heads the library: the key helpers and place/unplace, which file a job in (and out of)
// the structures its state calls for, in scope of every function.
//
// B is KEYS[1]; G is the store's prefix, for the global keys: B up to the hash tag (the prefix itself
// when a global script passes it as KEYS[1]). Only one key is declared, so a queue script names one
// slot. Each function of the library sets them, and decided, as it starts (lua.go).
const preludeBody = `
local function now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local function jk(id) return B .. 'j:' .. id end
local function s(x) return string.format('%d', x) end
-- sv returns a time field as stored (µs as text), '0' when unset: it is written as read, without a
-- round trip through a number.
local function sv(v) if v and v ~= '' then return v end return '0' end
local function num(v) if v == false or v == nil or v == '' then return 0 end return tonumber(v) end
local function rank(prio, due, id)
  if due < 0 then due = 0 end
  return string.format('%010d%016d', 2147483647 - prio, due) .. id
end
local function terminal(st) return st == 'completed' or st == 'cancelled' or st == 'discarded' end
-- zw writes (ZADD with score sc, or ZREM) member id of an index no function reads back while it
-- runs: a state's ids (st:<state>), the lease index, done:<state>. While zq is a table (Claim and
-- Finish turn it on; every function starts with it off, see lua.go) the writes are queued per key,
-- in order, and zflush sends each key's consecutive writes of one kind as one variadic call: a
-- claim or finish of many jobs then makes a few calls for these indexes, not four per job. Order is
-- kept per key and no other key is touched, so the indexes end as the writes one by one would leave
-- them.
local function zw(op, key, sc, id)
  if not zq then
    if op == 'ZADD' then return redis.call('ZADD', key, sc, id) end
    return redis.call('ZREM', key, id)
  end
  local runs = zq[key]
  if not runs then
    runs = {}
    zq[key] = runs
    zkeys[#zkeys + 1] = key
  end
  local r = runs[#runs]
  if not r or r.op ~= op then
    r = {op = op}
    runs[#runs + 1] = r
  end
  if op == 'ZADD' then r[#r + 1] = sc end
  r[#r + 1] = id
end
-- zflush sends the writes zw queued (in slices: unpack's stack is bounded) and turns queueing off.
local function zflush()
  if not zq then return end
  for _, key in ipairs(zkeys) do
    for _, r in ipairs(zq[key]) do
      for i = 1, #r, 1000 do redis.call(r.op, key, unpack(r, i, math.min(i + 999, #r))) end
    end
  end
  zq, zkeys = false, nil
end
local function notstarted(st)
  return st == 'scheduled' or st == 'available' or st == 'pending' or st == 'retryable'
end
-- src returns the ready set of available jobs of kind with rate key rk ('' for none).
local function src(kind, rk) return B .. 'k:' .. kind .. '\n' .. (rk or '') end
local function rl(rk) return G .. 'rl:' .. rk end
-- tsrc returns the ready set of available jobs of kind of tenant tn (jobs with a tenant and no rate
-- key). The tenants with such jobs form the ring tring (a list rotated by the claim; '\n', never a
-- tenant, stands for the jobs without a tenant), its members in tset; tk:<tenant> holds the kinds
-- of a tenant's ready sets.
local function tsrc(tn, kind) return B .. 'tj:' .. tn .. '\n' .. kind end
-- decided lists workflow jobs this script made terminal whose children settle must look at, each as
-- {id, base}: base is the key prefix of the job's queue when its workflow's keys are tagged by that
-- queue (job field wfl, see wfbase), else false.
local decided = {}
-- needed is what a Redis Cluster's claim that stopped for want of rate-limit permits asks for (see
-- needpermits in the claim), false when it did not stop.
local needed = false
-- none is an empty table no function writes to, for what a claim on a single node leaves empty.
local none = {}
-- released is the queue of the children settle released of a workflow tagged by its queue (false when
-- none): the script's own queue, which the caller announces from the script's reply (on a cluster the
-- notification channel is in another slot than the queue).
local released = false
-- relay lists the entries settle wrote to the queue's workflow outbox (wfout, see relay.go), false
-- for none: the outcomes of jobs of a workflow split over a Redis Cluster's queues, for their
-- children in the other queues. The caller delivers them (Store.relay).
local relay = false
-- heldback lists the jobs a claim dropped or rescheduled for their rate limit (false for none), for
-- store.ClaimParams.OnHeldBack: {'\nheld', {'d' or 'r', the job's HGETALL...}...}. 'quiet' makes the
-- claim leave such jobs as they are (an insert's claim for a waiting producer, which cannot report
-- them): the producer's own claim then holds them back and reports them.
local heldback = false
-- limhits lists the rate keys whose limit had no room for a job of theirs, for
-- store.ClaimParams.OnLimited: {'\nlimited', key, max, rate, period, window count, active, room,
-- ...}; false when the caller does not read them (its flag has no 'l', see claimBody): then the
-- claim works none of them out, the five numbers '' on a Redis Cluster, where the limit is in another slot (the caller has
-- them from its permits); room is 'r' for a key named only because jobs of it wait though it has
-- room (store.LimitHit.HasRoom), else ''.
local limhits = false
-- dropped lists the workflows whose last job this script deleted (forget): the caller removes them
-- from the workflow index, a global key.
local dropped = {}
-- record returns the fields of a job as fields returns them, the optional ones false. A constructor
-- sizes the table once (filling it in a loop costs as much as the HMGET that read them).
local function record(state, kind, prio, sched, lease, completed, attempt, token, started)
  return {state = state, kind = kind, prio = prio, sched = sched, lease = lease, completed = completed,
    attempt = attempt, token = token, started = started, expires = false, ukey = false, ustates = false,
    rkey = false, wf = false, runon = false, kids = false, tenant = false, tng = false, wfl = false,
    tnq = false, rkq = false, tlp = false, xkids = false}
end
-- optional reads into f the fields a job not marked plain may carry (see fields).
local function optional(id, f)
  local o = redis.call('HMGET', jk(id), 'expires', 'ukey', 'ustates', 'rkey', 'wf', 'runon', 'kids', 'tenant', 'tng', 'wfl', 'tnq', 'rkq', 'tlp', 'xkids')
  f.expires, f.ukey, f.ustates, f.rkey, f.wf, f.runon, f.kids, f.tenant, f.tng, f.wfl, f.tnq, f.rkq, f.tlp, f.xkids =
    o[1], o[2], o[3], o[4], o[5], o[6], o[7], o[8], o[9], o[10], o[11], o[12], o[13], o[14]
end
-- fields returns what place and unplace need of job id, and what the claim and finish check, by
-- name (false when absent), or nil for no job: a transition reads its job once. The optional
-- fields are read only for a job not marked plain (field p, see encode.go).
local function fields(id)
  local v = redis.call('HMGET', jk(id), 'state', 'kind', 'prio', 'sched', 'lease', 'completed', 'attempt',
    'token', 'started', 'p')
  if not v[1] then return nil end
  local f = record(v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9])
  if v[10] ~= '1' then optional(id, f) end
  return f
end
-- outcomefields is fields for Finish, whose job is active: it leaves out sched, lease and completed
-- (false), which an active job's unplace does not read and Finish writes before place reads them.
-- Those are the costly lookups of a job's hash (a small hash is a list, scanned for each field):
-- lease and completed sit at its end or are absent, which scans it all.
local function outcomefields(id)
  local v = redis.call('HMGET', jk(id), 'state', 'kind', 'prio', 'attempt', 'token', 'started', 'p')
  if not v[1] then return nil end
  local f = record(v[1], v[2], v[3], false, false, false, v[4], v[5], v[6])
  if v[7] ~= '1' then optional(id, f) end
  return f
end
-- jobof reads job id's whole hash in one call: its fields by name as fields returns them (the hash's
-- other fields beside them), and the flat HGETALL array, which a claim returns with the fields it
-- changes appended (the decoder keeps a field's last value). One HGETALL costs less than fields'
-- HMGET and a second read after the claim's HSET. nil for no job.
local function jobof(id)
  local a = redis.call('HGETALL', jk(id))
  if #a == 0 then return nil end
  local f = record(false, false, false, false, false, false, false, false, false)
  for i = 1, #a, 2 do f[a[i]] = a[i + 1] end
  return f, a
end
-- tenantkeys returns the keys that count job f in state st under its tenant (its counts, the set of
-- tenants, its jobs in st) and the tenant, or nil when nothing counts it: the store's keys for a job
-- with tng (a single node: across queues), the queue's for one with tnq (a Redis Cluster, where a
-- key spanning queues would span slots; tenant.go sums them).
local function tenantkeys(f, st)
  if f.tng then return G .. 'tc:' .. f.tng, G .. 'tenants', G .. 'tj:' .. st .. ':' .. f.tng, f.tng end
  if f.tnq then return B .. 'tc:' .. f.tnq, B .. 'tenants', B .. 'tjs:' .. st .. ':' .. f.tnq, f.tnq end
  return nil
end
-- ratekeys returns the keys that count job f's states under its rate key (a hash of n:<state>) and
-- hold its scheduled and retryable jobs by due time: the store's global keys (a single node: the
-- limit's own hash, across queues), or the queue's when the job carries rkq (a Redis Cluster, where
-- the limit lives in its own slot; ratelimit.go sums the queues' counts).
local function ratekeys(f)
  if f.rkq then return B .. 'rn:' .. f.rkey, B .. 'rs:' .. f.rkey end
  return rl(f.rkey), G .. 'rs:' .. f.rkey
end
-- wfbase returns the key prefix of the keys (wf:<id>, wfj:<id>) of a job's workflow: its own queue's
-- (B) when the job carries wfl (all the workflow's jobs are in that queue, so every workflow step is
-- one slot), else the store's prefix (a workflow spanning queues, single node only, or one written
-- before workflows were tagged by their queue).
local function wfbase(wfl)
  if wfl then return B end
  return G
end
-- uncount takes one from count field n of hash h, and deletes the field when it reaches 0: a hash
-- of counts (a tenant's, a rate key's) then goes with its last job instead of staying as zeros.
-- Returns whether h is gone.
local function uncount(h, n)
  if redis.call('HINCRBY', h, n, -1) ~= 0 then return false end
  redis.call('HDEL', h, n)
  return redis.call('EXISTS', h) == 0
end
-- unsource drops rate key rk from the claim's sources of kind (ks:<kind>) once its ready set is
-- empty, so that a claim reads the keys with available jobs, not every key ever used; place adds it
-- back with its next available job (filed forgets it, for a batch insert's later jobs).
local function unsource(kind, rk)
  if redis.call('EXISTS', src(kind, rk)) == 1 then return end
  redis.call('SREM', B .. 'ks:' .. kind, rk)
  if filed then filed[kind .. '\n' .. rk] = nil end
end
-- unplace takes job id out of every structure its current state filed it in, and returns its
-- fields (see fields; f when the caller read them already), or nil for no job.
local function unplace(id, f)
  f = f or fields(id)
  if not f then return nil end
  local st, rk = f.state, f.rkey
  zw('ZREM', B .. 'st:' .. st, nil, id)
  local tc, tl, tj, tn = tenantkeys(f, st)
  if tc then
    -- A tenant with no job left leaves the set of tenants with its counts (place adds it back).
    if uncount(tc, 'n:' .. st) then redis.call('ZREM', tl, tn) end
    redis.call('ZREM', tj, id)
  end
  if st == 'available' and f.tenant and f.tenant ~= '' and not rk then
    redis.call('ZREM', tsrc(f.tenant, f.kind), rank(num(f.prio), num(f.sched), id))
  elseif st == 'available' then
    redis.call('ZREM', src(f.kind, rk), rank(num(f.prio), num(f.sched), id))
    if rk then unsource(f.kind, rk) end
  elseif st == 'scheduled' or st == 'retryable' then
    redis.call('ZREM', B .. 'sched', id)
    if rk then redis.call('ZREM', select(2, ratekeys(f)), id) end
  elseif st == 'active' then
    zw('ZREM', B .. 'lease', nil, id)
  else
    zw('ZREM', B .. 'done:' .. st, nil, id)
  end
  if rk then uncount((ratekeys(f)), 'n:' .. st) end
  if f.wf then redis.call('HINCRBY', wfbase(f.wfl) .. 'wf:' .. f.wf, (f.runon and 'c:' or 'n:') .. st, -1) end
  -- Only a job with an expiry (set at insert, never changed) is ever in the expiry index.
  if num(f.expires) > 0 then redis.call('ZREM', B .. 'exp', id) end
  return f
end
-- unfile takes id, whose hash is gone (evicted under an allkeys-* maxmemory policy, or deleted by
-- hand), out of the queue's indexes that name it by id alone, which unplace cannot do without the
-- hash's state: left there, the passes that walk them would find it again each time, and a
-- transition of it would file a job without fields.
local function unfile(id)
  for _, st in ipairs({'scheduled', 'available', 'pending', 'retryable', 'active', 'completed', 'cancelled', 'discarded'}) do
    redis.call('ZREM', B .. 'st:' .. st, id)
  end
  for _, st in ipairs({'completed', 'cancelled', 'discarded'}) do redis.call('ZREM', B .. 'done:' .. st, id) end
  redis.call('ZREM', B .. 'sched', id)
  redis.call('ZREM', B .. 'lease', id)
  redis.call('ZREM', B .. 'exp', id)
end
-- instates reports whether state st is in the comma-separated list sts.
local function instates(st, sts)
  return string.find(',' .. (sts or '') .. ',', ',' .. st .. ',', 1, true) ~= nil
end
-- holds reports whether job id holds unique key uk at time t: its key is uk, its state is one of
-- its unique states, and its period (if any) has not run out.
local function holds(id, uk, t)
  local f = redis.call('HMGET', jk(id), 'state', 'ukey', 'ustates', 'uuntil')
  if not f[1] or f[2] ~= uk then return false end
  local uu = num(f[4])
  if uu > 0 and uu <= t then return false end
  return instates(f[1], f[3])
end
-- holder returns the job holding unique key uk at time t and its state, or nil.
local function holder(uk, t)
  local cur = redis.call('GET', B .. 'u:' .. uk)
  if cur and holds(cur, uk, t) then return cur, redis.call('HGET', jk(cur), 'state') end
  return nil
end
-- place files job id as its hash says (f: its fields as they now are, when the caller has them;
-- see fields). A unique job entering one of its unique states takes its key, or gives it up (ukey
-- "") when another job holds it: automatic transitions never fail for uniqueness.
local function place(id, f)
  f = f or fields(id)
  local st = f.state
  local rk = f.rkey
  local tc, tl, tj, tn = tenantkeys(f, st)
  if tc then
    redis.call('HINCRBY', tc, 'n:' .. st, 1)
    redis.call('ZADD', tl, 0, tn)
    redis.call('ZADD', tj, '0', id)
  end
  if f.wf then
    -- Members count as n:<state>, callbacks as c:<state>; lastdone is the latest end of either.
    local w = wfbase(f.wfl) .. 'wf:' .. f.wf
    redis.call('HINCRBY', w, (f.runon and 'c:' or 'n:') .. st, 1)
    if terminal(st) and num(f.completed) > num(redis.call('HGET', w, 'lastdone')) then
      redis.call('HSET', w, 'lastdone', s(num(f.completed)))
    end
    if terminal(st) and ((f.kids and f.kids ~= '') or f.xkids) then decided[#decided + 1] = {id, f.wfl and B} end
  end
  if f.ukey and f.ukey ~= '' and instates(st, f.ustates) then
    local cur = redis.call('GET', B .. 'u:' .. f.ukey)
    if cur ~= id then
      if cur and holds(cur, f.ukey, now()) then
        redis.call('HSET', jk(id), 'ukey', '')
        f.ukey = ''
      else
        redis.call('SET', B .. 'u:' .. f.ukey, id)
      end
    end
  end
  zw('ZADD', B .. 'st:' .. st, '0', id)
  if st == 'available' and f.tenant and f.tenant ~= '' and not rk then
    local tn = f.tenant
    redis.call('ZADD', tsrc(tn, f.kind), '0', rank(num(f.prio), num(f.sched), id))
    redis.call('SADD', B .. 'tk:' .. tn, f.kind)
    if redis.call('SADD', B .. 'tset', tn) == 1 then
      -- A new tenant joins at the end of the round (the claim rotates from the right).
      if redis.call('EXISTS', B .. 'tring') == 0 then redis.call('LPUSH', B .. 'tring', '\n') end
      redis.call('LPUSH', B .. 'tring', tn)
    end
  elseif st == 'available' then
    redis.call('ZADD', src(f.kind, rk), '0', rank(num(f.prio), num(f.sched), id))
    -- filed, while a table (the batch insert turns it on; every function starts with it false,
    -- see lua.go), holds the sources (kind, rate key) registered in kinds and ks: during this call,
    -- so that a batch of one kind registers it once, not once per job. A call writes one queue.
    local fk = filed and f.kind .. '\n' .. (rk or '')
    if not (fk and filed[fk]) then
      redis.call('SADD', B .. 'kinds', f.kind)
      redis.call('SADD', B .. 'ks:' .. f.kind, rk or '')
      if fk then filed[fk] = true end
    end
  elseif st == 'scheduled' or st == 'retryable' then
    redis.call('ZADD', B .. 'sched', sv(f.sched), id)
    if rk then redis.call('ZADD', select(2, ratekeys(f)), sv(f.sched), id) end
  elseif st == 'active' then
    zw('ZADD', B .. 'lease', sv(f.lease), id)
  else
    zw('ZADD', B .. 'done:' .. st, sv(f.completed), id)
  end
  if rk then redis.call('HINCRBY', (ratekeys(f)), 'n:' .. st, 1) end
  if num(f.expires) > 0 and notstarted(st) then
    redis.call('ZADD', B .. 'exp', sv(f.expires), id)
  end
end
-- qbase returns the key prefix of another queue (as Store.qkey does).
local function qbase(queue)
  if string.find(queue, '[{}]') then
    return G .. '{h:' .. string.gsub(queue, '.', function(c) return string.format('%02x', string.byte(c)) end) .. '}:'
  end
  return G .. '{q:' .. queue .. '}:'
end
-- inb runs f with B switched to the queue keys under base b; inq, to queue's keys (a workflow spanning
-- queues; single Redis node only).
local function inb(b, f)
  local old = B
  B = b
  local r = f()
  B = old
  return r
end
local function inq(queue, f) return inb(qbase(queue), f) end
-- forget drops a deleted job (its wf and wfl fields) from its workflow, and the workflow with its
-- last job, which it lists in dropped.
local function forget(id, wf, wfl)
  if not wf then return end
  local w = wfbase(wfl)
  redis.call('ZREM', w .. 'wfj:' .. wf, id)
  if redis.call('ZCARD', w .. 'wfj:' .. wf) == 0 then
    redis.call('DEL', w .. 'wf:' .. wf)
    dropped[#dropped + 1] = wf
  end
end
-- letgo deletes unique key uk's record (u:<key>) while it names job id, which is deleted or gives
-- the key up: the record goes with the job that last took the key.
local function letgo(uk, id)
  if not uk or uk == '' then return end
  if redis.call('GET', B .. 'u:' .. uk) == id then redis.call('DEL', B .. 'u:' .. uk) end
end
-- drop deletes job id, which unplace took out of its structures (f: the fields unplace returned),
-- with the record of the unique key it took, and forgets it in its workflow.
local function drop(id, f)
  redis.call('DEL', jk(id))
  if not f then
    unfile(id)
    return
  end
  letgo(f.ukey, id)
  forget(id, f.wf, f.wfl)
end
-- waited reports whether a pending child still waits for job id: its state decides the child's
-- release and its result goes into the child's presults, so the prune functions keep it. Its
-- children are found as settle finds them (kids: in B when the workflow is tagged by its queue,
-- else through the id index, single node); those in other queues of a split workflow (xkids) read
-- the outcome relayed to their queue, not the job.
local function waited(id)
  local f = redis.call('HMGET', jk(id), 'kids', 'wfl')
  for kid in string.gmatch(f[1] or '', '[^,]+') do
    local k = false
    if f[2] then
      k = jk(kid)
    else
      local q = redis.call('HGET', G .. 'ids', kid)
      k = q and qbase(q) .. 'j:' .. kid
    end
    if k and redis.call('HGET', k, 'state') == 'pending' then return true end
  end
  return false
end
-- prunable reports whether job id is still discarded with completion time at (µs, as text), the
-- version a prune pass selected or an archiver read, and no pending child waits for it.
local function prunable(id, at)
  local sc = redis.call('ZSCORE', B .. 'done:discarded', id)
  return sc and tonumber(sc) == tonumber(at) and not waited(id)
end
-- pkey returns the key of parent pid's hash (nil when unknown): in B when the workflow is tagged by
-- its queue (loc), else found through the id index.
local function pkey(pid, loc)
  if loc then return jk(pid) end
  local pq = redis.call('HGET', G .. 'ids', pid)
  if pq then return qbase(pq) .. 'j:' .. pid end
  return nil
end
-- parent returns the state and result of parent pid of a job of workflow wf (false for what is
-- unknown; loc: see pkey). A parent in another queue of a workflow split over a Redis Cluster's
-- queues (relay.go) is read from what its queue relayed into this queue's part of the workflow
-- (fields ps:<id> and pr:<id>).
local function parent(pid, loc, wf)
  local pk = pkey(pid, loc)
  if not pk then return false, false end
  local v = redis.call('HMGET', pk, 'state', 'result')
  if v[1] or not loc then return v[1], v[2] end
  v = redis.call('HMGET', B .. 'wf:' .. wf, 'ps:' .. pid, 'pr:' .. pid)
  return v[1], v[2]
end
-- parentlist returns the length of the JSON list of parent ids s and a function giving its i-th id.
-- pronto's job ids are UUIDs, 39 bytes apart in the list, so an id is read in place, its quotes
-- checked: decide reads a few parents per outcome, and decoding a fan-in's whole list each time
-- cost n² over the workflow. A list of other ids is decoded.
local function parentlist(s)
  local n = (#s - 1) / 39
  if n >= 1 and n == math.floor(n) then
    local p
    return n, function(i)
      local a = i * 39
      if not p and string.sub(s, a - 37, a - 37) == '"' and string.sub(s, a, a) == '"' then
        local id = string.sub(s, a - 36, a - 1)
        if not string.find(id, '"', 1, true) then return id end
      end
      p = p or cjson.decode(s)
      return p[i]
    end
  end
  local p = cjson.decode(s)
  return #p, function(i) return p[i] end
end
-- decide applies the rule of pending child id's run_on to its parents' states (loc: see pkey). trig
-- is the state of the parent whose outcome asks (false: none known). Every rule waits while a parent
-- is unfinished, except that of a plain step or on_success, which a failed parent cancels at once;
-- since a parent's failure settles its children when it happens, a child still pending has no
-- failed parent but trig. So the scan stops at the first unfinished parent, and goes from the last
-- named, which tend to finish last: a wide group's callbacks cost little per member's outcome,
-- where reading every parent each time made a group of n members cost n².
local function decide(id, loc, trig)
  local f = redis.call('HMGET', jk(id), 'parents', 'runon', 'wf')
  local success = f[2] ~= 'failure' and f[2] ~= 'complete'
  if trig and success and terminal(trig) and trig ~= 'completed' then return 'cancel' end
  local n, pid = parentlist(f[1])
  local term, comp = 0, 0
  for i = n, 1, -1 do
    local pst = parent(pid(i) or '', loc, f[3]) -- '' (no such parent): unfinished
    if pst and terminal(pst) then
      term = term + 1
      if pst == 'completed' then comp = comp + 1 elseif success then return 'cancel' end
    elseif trig or not success then
      return 'wait'
    end
  end
  local all, failed = term == n, term > comp
  if f[2] == 'failure' then
    if not all then return 'wait' end
    if failed then return 'release' end
    return 'cancel'
  elseif f[2] == 'complete' then
    if all then return 'release' end
    return 'wait'
  end
  if failed then return 'cancel' end
  if all then return 'release' end
  return 'wait'
end
-- waits reports whether workflow job id's parents would keep it waiting were it pending (loc: see
-- pkey): one has not finished (one unknown, deleted by hand or in another queue that has not
-- relayed its outcome, counts as not finished), and none failed unless id runs on failure or
-- completion. decide relies on a pending plain step having no failed parent.
local function waits(id, loc)
  local f = redis.call('HMGET', jk(id), 'parents', 'wf', 'runon')
  local success = f[3] ~= 'failure' and f[3] ~= 'complete'
  local open = false
  for _, pid in ipairs(cjson.decode(f[1])) do
    local pst = parent(pid, loc, f[2])
    if not (pst and terminal(pst)) then
      open = true
    elseif success and pst ~= 'completed' then
      return false
    end
  end
  return open
end
-- results is the JSON array of the parents' results of id, null for a parent without one (loc: see
-- pkey).
local function results(id, loc)
  local f = redis.call('HMGET', jk(id), 'parents', 'wf')
  local parents = cjson.decode(f[1])
  local parts = {}
  for i, pid in ipairs(parents) do
    local _, r = parent(pid, loc, f[2])
    if not r or r == '' then r = 'null' end
    parts[i] = r
  end
  return '[' .. table.concat(parts, ',') .. ']'
end
-- settlekid decides pending child kid of a workflow job made terminal (loc: see pkey), in the queue
-- under key prefix kb (its own). kq is its queue when the workflow is of the global layout (single
-- node): a release there goes into announce.
local function settlekid(kid, kb, loc, kq, t, announce, trig)
  inb(kb, function()
    if redis.call('HGET', jk(kid), 'state') ~= 'pending' then return end
    local o = decide(kid, loc, trig)
    if o == 'release' then
      local pr = results(kid, loc)
      unplace(kid)
      redis.call('HSET', jk(kid), 'state', 'available', 'sched', s(t), 'presults', pr)
      place(kid)
      if loc then released = redis.call('HGET', jk(kid), 'queue') else announce[kq] = true end
    elseif o == 'cancel' then
      unplace(kid)
      redis.call('HSET', jk(kid), 'state', 'cancelled', 'completed', s(t))
      place(kid)
    end
  end)
end
-- outbox writes, for the children in other queues (xkids: JSON, queue -> their ids joined by ',')
-- of job id of workflow wf (a workflow split over a Redis Cluster's queues, in this queue's slot),
-- one entry per queue into the queue's workflow outbox: the job's terminal state and result, for
-- Store.relay to deliver there (scriptDeliver).
local function outbox(id, xkids)
  local f = redis.call('HMGET', jk(id), 'wf', 'state', 'result')
  relay = relay or {}
  for q, ids in pairs(cjson.decode(xkids)) do
    local e = cjson.encode({q = q, w = f[1], p = id, s = f[2], r = f[3] or '', k = ids})
    redis.call('RPUSH', B .. 'wfout', e)
    relay[#relay + 1] = e
  end
end
-- settle decides the pending children of the workflow jobs made terminal (decided), and of the
-- children it cancels in turn. A workflow tagged by its queue has its children in that queue, the
-- script's own, touched through B alone (no global key: one slot on a cluster); a release there
-- sets released, for the caller to announce; children in other queues (a workflow split over a
-- Redis Cluster's queues) get the outcome through the outbox. A workflow of the global layout
-- (single node) finds its children's queues in the id index, and the queues of those released are
-- announced here.
local function settle(t)
  if #decided == 0 then return end
  local announce = {}
  while #decided > 0 do
    local d = table.remove(decided)
    local id, lb = d[1], d[2]
    local kids, st = false, false
    if lb then
      local f = redis.call('HMGET', lb .. 'j:' .. id, 'kids', 'xkids', 'state')
      kids, st = f[1], f[3]
      if f[2] then inb(lb, function() outbox(id, f[2]) end) end
    else
      local q = redis.call('HGET', G .. 'ids', id)
      if q then
        local f = redis.call('HMGET', qbase(q) .. 'j:' .. id, 'kids', 'state')
        kids, st = f[1], f[2]
      end
    end
    for kid in string.gmatch(kids or '', '[^,]+') do
      if lb then
        settlekid(kid, lb, lb, nil, t, announce, st)
      else
        local kq = redis.call('HGET', G .. 'ids', kid)
        if kq then settlekid(kid, qbase(kq), false, kq, t, announce, st) end
      end
    end
  end
  for q in pairs(announce) do
    redis.call('SPUBLISH', G .. '{notify}', cjson.encode({k = 'insert', q = q}))
  end
end
-- rlblocked reports whether rate key rk can start no job at t, with the end of the rate window
-- that blocks it (0 when only max_active does) and the limit's on_limit action.
local function rlblocked(rk, t)
  local f = redis.call('HMGET', rl(rk), 'set', 'max', 'rate', 'period', 'ws', 'wc', 'n:active', 'onlimit')
  if f[1] ~= '1' then return false end
  local rate, per = num(f[3]), num(f[4])
  if rate > 0 and per > 0 then
    local ws = num(f[5])
    if ws > 0 and t < ws + per and num(f[6]) >= rate then return true, ws + per, f[8] end
  end
  if num(f[2]) > 0 and num(f[7]) >= num(f[2]) then return true, 0, f[8] end
  return false
end
-- rlstarted counts a start of one of rk's jobs at t in its rate window, opening one if none is.
local function rlstarted(rk, t)
  local f = redis.call('HMGET', rl(rk), 'set', 'rate', 'period', 'ws')
  if f[1] ~= '1' then return end
  local per = num(f[3])
  if num(f[2]) > 0 and per > 0 then
    local ws = num(f[4])
    if not (ws > 0 and t < ws + per) then redis.call('HSET', rl(rk), 'ws', s(t), 'wc', 0) end
    redis.call('HINCRBY', rl(rk), 'wc', 1)
  end
end
-- tblocked reports whether tenant tn's limit (under 'tenant:'..tn) lets it start no job at t: its
-- rate window is spent, or its active jobs across queues (<prefix>tc:<tenant>) reach max.
local function tblocked(tn, t)
  local f = redis.call('HMGET', rl('tenant:' .. tn), 'set', 'max', 'rate', 'period', 'ws', 'wc')
  if f[1] ~= '1' then return false end
  local rate, per = num(f[3]), num(f[4])
  if rate > 0 and per > 0 then
    local ws = num(f[5])
    if ws > 0 and t < ws + per and num(f[6]) >= rate then return true end
  end
  return num(f[2]) > 0 and num(redis.call('HGET', G .. 'tc:' .. tn, 'n:active')) >= num(f[2])
end
-- limhit adds rate key rk to limhits once: on a single node (single) with its limit's use at t (for a
-- tenant's limit key, the tenant's active jobs across queues), on a Redis Cluster or with room (the
-- key has room, see limhits) without.
local function limhit(rk, t, single, room)
  if not limhits then return end
  for i = 2, #limhits, 7 do if limhits[i] == rk then return end end
  local n = #limhits
  if room or not single then
    limhits[n + 1], limhits[n + 2], limhits[n + 3], limhits[n + 4], limhits[n + 5], limhits[n + 6] = rk, '', '', '', '', ''
    limhits[n + 7] = room and 'r' or ''
    return
  end
  local f = redis.call('HMGET', rl(rk), 'max', 'rate', 'period', 'ws', 'wc', 'n:active')
  local wc, active = 0, num(f[6])
  if num(f[2]) > 0 and num(f[3]) > 0 and num(f[4]) > 0 and t < num(f[4]) + num(f[3]) then wc = num(f[5]) end
  if string.sub(rk, 1, 7) == 'tenant:' then active = num(redis.call('HGET', G .. 'tc:' .. string.sub(rk, 8), 'n:active')) end
  limhits[n + 1], limhits[n + 2], limhits[n + 3], limhits[n + 4], limhits[n + 5], limhits[n + 6] =
    rk, s(num(f[1])), s(num(f[2])), s(num(f[3])), s(wc), s(active)
  limhits[n + 7] = ''

end
-- setlimit stores a limit ("max,rate,period_us,onlimit") under rk.
local function setlimit(rk, enc)
  local max, rate, per, on = string.match(enc, '^(%-?%d+),(%-?%d+),(%-?%d+),(.*)$')
  redis.call('HSET', rl(rk), 'set', '1', 'max', max, 'rate', rate, 'period', per, 'onlimit', on)
  redis.call('ZADD', G .. 'rlkeys', 0, rk)
end
-- iso formats microseconds since the epoch as RFC 3339 in UTC, for the error entries scripts write.
local function iso(us)
  local s = math.floor(us / 1000000)
  local frac = us - s * 1000000
  local days = math.floor(s / 86400)
  local rem = s - days * 86400
  local z = days + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524) - math.floor(doe / 146096)) / 365)
  local y = yoe + era * 400
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local d = doy - math.floor((153 * mp + 2) / 5) + 1
  local m = mp + 3
  if mp >= 10 then m = mp - 9 end
  if m <= 2 then y = y + 1 end
  return string.format('%04d-%02d-%02dT%02d:%02d:%02d.%06dZ', y, m, d,
    math.floor(rem / 3600), math.floor((rem % 3600) / 60), rem % 60, frac)
end
-- adderr appends one JSON error entry to the job's error history (a JSON array).
local function adderr(id, e)
  local cur = redis.call('HGET', jk(id), 'errors')
  if not cur or cur == '' then cur = '[' .. e .. ']' else cur = string.sub(cur, 1, -2) .. ',' .. e .. ']' end
  redis.call('HSET', jk(id), 'errors', cur)
end
local function mkerr(attempt, at, typ, msg)
  return cjson.encode({attempt = attempt, at = iso(at), type = typ, message = msg})
end
-- withstart adds started_at (the attempt's start, µs as text; nothing when unset) to the JSON error
-- object e, as its last member.
local function withstart(e, started)
  local us = num(started)
  if us <= 0 then return e end
  local body = string.sub(e, 2, -2)
  if string.find(body, '%S') then body = body .. ',' end
  return '{' .. body .. '"started_at":"' .. iso(us) .. '"}'
end
-- claimcancelled records that active job id's claim ended by a cancel at t (its run may still
-- report: store.ErrorTypeCancelled); before leave, which clears the worker.
local function claimcancelled(id, t)
  local f = redis.call('HMGET', jk(id), 'attempt', 'worker', 'started')
  adderr(id, withstart(mkerr(num(f[1]), t, 'cancelled', 'cancelled while running on worker ' .. (f[2] or '')), f[3]))
end
-- leave clears what only an active job carries.
local function leave(id)
  redis.call('HSET', jk(id), 'lease', '0', 'worker', '', 'token', '')
end
`

// scriptRegisterIDs records the queue of each new job id in the global id index (KEYS[1]), or
// changes nothing and returns the first id already there. ARGV: id1, queue1, id2, queue2, ...
var scriptRegisterIDs = newFunc("RegisterIDs", `
for i = 1, #ARGV, 2 do
  if redis.call('HEXISTS', KEYS[1], ARGV[i]) == 1 then return ARGV[i] end
end
for i = 1, #ARGV, 2 do
  if i > 1 and ARGV[i] == ARGV[i - 2] then return ARGV[i] end
end
-- In slices: unpack has a limit on how many values it spreads.
for i = 1, #ARGV, 400 do
  redis.call('HSET', KEYS[1], unpack(ARGV, i, math.min(i + 399, #ARGV)))
end
return false
`)

// scriptInsert writes new jobs of one queue. ARGV: n, then per job: id, policy, ukey, ustates,
// state, rate key, rate limit to store with it ("" for none; see setlimit), nfields, field, value, ... (no sched field: due now). Unique keys are resolved as features.go
// says, within the queue: a first pass finds a conflict that refuses the batch (and returns
// {"uc", key, holder id, holder state}, writing nothing); the second pass writes. Without the id
// index (a cluster) a job whose hash exists refuses the batch ({"dup", id, ...}, every such id,
// writing nothing). Returns
// {"ok", now, dups, changed, cancels, replaced}: dups and changed list {job index, job} for ignored
// jobs (the holder) and for jobs that took over a replaced job's schedule; cancels lists the
// replaced jobs that were active, each as its id and its run's claim token; replaced lists {job
// index, job} for each job a replacement cancelled, as it was before (store.Job.Replaced).
//
// On a single node the whole insert is this one call (one round trip): with KEYS[2] (the id index)
// and KEYS[3] (the queue registry) given, and ARGV after the jobs: queue, sender, nonce, it also
// refuses an id already in the index (returning {"dup", id}, writing nothing), records the ids it
// wrote there, registers the queue and publishes the insert notification itself. A cluster cannot
// (those keys live in other slots): there the index is written first by scriptRegisterIDs.
var scriptInsert = newFunc("Insert", `
zq, zkeys, filed = {}, {}, {}
local t = now()
local ts = s(t)
local n = tonumber(ARGV[1])
local jobs = {}
local i = 2
for x = 1, n do
  local nf = tonumber(ARGV[i + 7])
  jobs[x] = {id = ARGV[i], policy = ARGV[i + 1], uk = ARGV[i + 2], us = ARGV[i + 3], st = ARGV[i + 4],
    rk = ARGV[i + 5], rl = ARGV[i + 6], from = i + 8, to = i + 7 + 2 * nf}
  i = i + 8 + 2 * nf
end
local whole = #KEYS >= 3
if whole then
  -- One HMGET of the id index per 1000 jobs (unpack's stack is bounded).
  for a = 1, n, 1000 do
    local ids = {}
    for x = a, math.min(a + 999, n) do ids[#ids + 1] = jobs[x].id end
    local got = redis.call('HMGET', KEYS[2], unpack(ids))
    for y = 1, #ids do if got[y] then return {'dup', ids[y]} end end
  end
else
  -- A job already stored (an insert whose reply was lost, tried again) is not written, nor counted,
  -- twice: the batch is refused, naming every such job.
  local found = {'dup'}
  for _, j in ipairs(jobs) do
    if redis.call('EXISTS', jk(j.id)) == 1 then found[#found + 1] = j.id end
  end
  if #found > 1 then return found end
end
-- Pass 1: would any job be refused? taken simulates the keys the batch's earlier jobs take.
local taken = {}
for _, j in ipairs(jobs) do
  if j.uk ~= '' then
    local hid, hst = nil, nil
    if taken[j.uk] then hid, hst = taken[j.uk][1], taken[j.uk][2] else hid, hst = holder(j.uk, t) end
    if hid and (j.policy == '' or j.policy == 'reject') then return {'uc', j.uk, hid, hst} end
    if not (hid and j.policy == 'ignore') and instates(j.st, j.us) then taken[j.uk] = {j.id, j.st} end
  end
end
-- Pass 2: write.
local dups, changed, cancels, replaced = {}, {}, {}, {}
for x, j in ipairs(jobs) do
  local skip = false
  local adopt = nil
  if j.uk ~= '' then
    local cur = redis.call('GET', B .. 'u:' .. j.uk)
    if cur then
      local uu = num(redis.call('HGET', jk(cur), 'uuntil'))
      if uu > 0 and uu <= t and redis.call('HGET', jk(cur), 'ukey') == j.uk then
        redis.call('HSET', jk(cur), 'ukey', '') -- its period ran out: the key is free
        redis.call('DEL', B .. 'u:' .. j.uk)
      end
    end
    local hid, hst = holder(j.uk, t)
    if hid then
      if j.policy == 'ignore' then
        dups[#dups + 1] = {x, redis.call('HGETALL', jk(hid))}
        skip = true
      else
        if j.policy == 'replace_except_schedule' and (hst == 'scheduled' or hst == 'retryable') then
          adopt = {hst, redis.call('HGET', jk(hid), 'sched')}
        end
        if terminal(hst) then
          -- A finished holder (its states include a terminal one) stays as it is and gives the key up.
          redis.call('HSET', jk(hid), 'ukey', '')
          letgo(j.uk, hid)
        else
          replaced[#replaced + 1] = {x, redis.call('HGETALL', jk(hid))}
          if hst == 'active' then
            cancels[#cancels + 1] = hid
            cancels[#cancels + 1] = redis.call('HGET', jk(hid), 'token') or ''
            claimcancelled(hid, t)
          end
          unplace(hid)
          redis.call('HSET', jk(hid), 'state', 'cancelled', 'completed', s(t))
          if instates('cancelled', redis.call('HGET', jk(hid), 'ustates')) then
            -- Cancelled, it would still hold the key and keep it from its replacement: it gives
            -- the key up, as on PostgreSQL.
            redis.call('HSET', jk(hid), 'ukey', '')
            letgo(j.uk, hid)
          end
          leave(hid)
          place(hid)
        end
      end
    end
  end
  if not skip then
    if j.rl ~= '' then setlimit(j.rk, j.rl) end
    local k = jk(j.id)
    -- One HSET: created, and sched now unless the job's fields (later pairs win) give one. f is
    -- the new hash as place reads it, from the arguments rather than read back.
    redis.call('HSET', k, 'created', ts, 'sched', ts, unpack(ARGV, j.from, j.to))
    local f = {sched = ts}
    for a = j.from, j.to, 2 do f[ARGV[a]] = ARGV[a + 1] end
    if adopt then
      redis.call('HSET', k, 'state', adopt[1], 'sched', adopt[2])
      f.state, f.sched = adopt[1], adopt[2]
    end
    j.f = f
    place(j.id, f)
    if adopt then changed[#changed + 1] = {x, redis.call('HGETALL', k)} end
    j.written = true
  end
end
if whole then
  -- Index the written jobs and announce the queue when any of them is claimable or will be: due
  -- now (no "d") or the earliest future due time, as Go's insert would have.
  local q = ARGV[i]
  local announce, due = false, 0
  local idx = {}
  for _, j in ipairs(jobs) do
    if j.written then
      idx[#idx + 1] = j.id
      idx[#idx + 1] = q
      local st = j.f.state
      if st == 'available' then
        announce, due = true, -1
      elseif st == 'scheduled' or st == 'retryable' then
        announce = true
        local d = num(j.f.sched)
        if d <= t then due = -1 elseif due == 0 or (due > 0 and d < due) then due = d end
      end
    end
  end
  for a = 1, #idx, 1000 do redis.call('HSET', KEYS[2], unpack(idx, a, math.min(a + 999, #idx))) end
  redis.call('SADD', KEYS[3], q)
  if announce then
    local d = ''
    if due > 0 then d = ',"d":' .. s(due) end
    redis.call('SPUBLISH', G .. '{notify}', '{"k":"insert","q":' .. cjson.encode(q) .. d ..
      ',"n":' .. ARGV[i + 2] .. ',"s":"' .. ARGV[i + 1] .. '"}')
  end
end
zflush()
return {'ok', t, dups, changed, cancels, replaced}
`)

// scriptInsertOne is scriptInsert's single-node call for the common single insert: one available
// job due now, with no unique key, tenant, rate key, workflow or expiry (see plainInsert). It
// skips the prelude and every read: the id index entry doubles as the duplicate check (HSETNX),
// and place's filing of such a job is spelled out (keep it in step with place). KEYS: the queue's
// prefix, the id index, the queue registry. ARGV: id, queue, kind, the rank's priority part (10
// digits, see rank), the insert notification, "1" when the caller's own subscription to the
// channel is up, then the job's other field, value pairs (plainFields: the fields every plain job
// has alike are written here). The notification is published only when some other subscriber
// listens: with the caller's subscription up, a count of one is the caller, which wakes its own
// subscribers itself (and would only skip the echo). Returns {"dup", id}, or the server's now
// in µs: negated when the job was handed to a waiting producer (handoff.go), which is then not
// announced (one integer: the common reply parses without allocating).
var scriptInsertOne = newFunc("InsertOne", `
local B, id, q, kind, note, solo = KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[5], ARGV[6] == '1'
if redis.call('HSETNX', KEYS[2], id, q) == 0 then return {'dup', id} end
local tm = redis.call('TIME')
-- Now in µs as text (seconds, then the microseconds padded to 6 digits), built without numbers.
local t = tm[1] .. string.rep('0', 6 - #tm[2]) .. tm[2]
redis.call('SADD', KEYS[3], q)
-- Hand-off (handoff.go): the first producer waiting with a free slot for this kind (its
-- advertisement: the claim arguments to use for it) gets the job claimed for it here, pushed onto
-- its inbox list, which it waits on (BLMOVE); nothing is then published.
local wk, ad, p = B .. 'wait', nil, nil
if redis.call('EXISTS', wk) == 1 then
  redis.call('ZREMRANGEBYSCORE', wk, '-inf', '(' .. t)
  for _, cand in ipairs(redis.call('ZRANGE', wk, '0', '3')) do
    local a = redis.call('LRANGE', B .. 'w:' .. cand, '0', '-1')
    local nk = tonumber(a[4] or '-1')
    local ok = nk == 0
    for i = 5, 4 + nk do if a[i] == kind then ok = true end end
    if ok then ad, p = a, cand break end
  end
end
local k = B .. 'j:' .. id
local handed = nil
if ad and redis.call('EXISTS', B .. 'paused', B .. 'tring') == 0 and redis.call('ZCARD', B .. 'st:available') == 0 and
  #redis.call('ZRANGEBYSCORE', B .. 'sched', '-inf', t, 'LIMIT', '0', '1') == 0 then
  -- Nothing else is claimable (no available job, none due, no tenant turn, not paused), so the
  -- claim would take this job: it is written active under the advertised claim at once, filed as
  -- place files an active plain job (keep in step with place and the claim's activate). The
  -- fields written are also what is handed: no read back.
  local nk = tonumber(ad[4])
  local lease = string.format('%d', tonumber(t) + tonumber(ad[3]))
  handed = {'id', id, 'queue', q, 'kind', kind, 'state', 'active', 'attempt', '1', 'p', '1', 'created', t,
    'sched', t, 'started', t, 'lease', lease, 'worker', ad[2], 'token', ad[5 + nk]}
  for i = 7, #ARGV do handed[#handed + 1] = ARGV[i] end
  redis.call('HSET', k, unpack(handed))
  redis.call('ZADD', B .. 'st:active', '0', id)
  redis.call('ZADD', B .. 'lease', lease, id)
else
  redis.call('HSET', k, 'id', id, 'queue', q, 'kind', kind, 'state', 'available', 'attempt', '0', 'p', '1',
    'created', t, 'sched', t, unpack(ARGV, 7))
  redis.call('ZADD', B .. 'st:available', '0', id)
  redis.call('ZADD', B .. 'k:' .. kind .. '\n', '0', ARGV[4] .. string.rep('0', 16 - #t) .. t .. id)
  redis.call('SADD', B .. 'kinds', kind)
  redis.call('SADD', B .. 'ks:' .. kind, '')
  if ad then
    -- Other jobs may come first: the claim decides.
    ARGV = ad
    heldback = 'quiet'
    handed = claimjobs()[1]
  end
end
if handed then
  redis.call('ZREM', wk, p)
  redis.call('DEL', B .. 'w:' .. p)
  local parts, gid = {}, nil
  for i, v in ipairs(handed) do
    parts[i] = #v .. ':' .. v
    if v == 'id' and i % 2 == 1 then gid = handed[i + 1] end
  end
  local ik = B .. 'in:' .. p
  redis.call('RPUSH', ik, table.concat(parts))
  redis.call('PEXPIRE', ik, '60000')
  -- When the claim took another job, this one still needs a claimer.
  if gid == id then return -tonumber(t) end
end
local ch = string.match(B, '^(.-){') .. '{notify}'
if not solo or redis.call('PUBSUB', 'SHARDNUMSUB', ch)[2] > 1 then redis.call('SPUBLISH', ch, note) end
return tonumber(t)
`)

// scriptClaim moves up to ARGV[1] claimable jobs to active and returns them (HGETALL arrays).
// ARGV: limit, worker, lease (µs), nkinds, kinds..., then limit claim tokens, the global flag, and
// optionally limit worker ids: the n-th job claimed takes the n-th token and, when they are given,
// the n-th worker id instead of worker (ClaimParams.WorkerIDs). Due scheduled and
// retryable jobs become available first, so the claim weighs them by priority like the others.
// Available jobs sit in one sorted set per kind and rate key (a source); the claim merges the heads
// of the sources in claim order. A job whose rate key is exhausted is dropped or rescheduled as its
// limit says, or, when the limit waits, its whole source is left alone for this claim.
var scriptClaim = newFunc("Claim", `
zq, zkeys = {}, {}
local out = claimjobs()
zflush()
local njobs = #out
-- The jobs the claim held back for their rate limit, then the outbox entries of split workflows'
-- jobs the claim dropped (relay.go), then the permits it stopped for: the caller reads them from
-- the end of the reply.
if limhits and #limhits > 1 then out[#out + 1] = limhits end
if heldback then out[#out + 1] = heldback end
if relay then out[#out + 1] = {'\nrelay', unpack(relay)} end
if needed then out[#out + 1] = needed end
-- An advertisement (see handoff.go) follows the flag when the claim is for one worker: a claim that
-- leaves slots free (it took fewer than the limit) advertises its producer as waiting, with the
-- claim arguments an insert uses to claim for it (limit 1, the hand-off's lease, a fresh token); a
-- full claim withdraws it.
local nk, limit = tonumber(ARGV[4]), tonumber(ARGV[1])
local at = 6 + nk + limit
if ARGV[at] == '\nad' then
  local p, ttl = ARGV[at + 1], tonumber(ARGV[at + 2])
  local w = B .. 'w:' .. p
  redis.call('DEL', w)
  if njobs < limit then
    local a = {'1', ARGV[2], ARGV[at + 3], ARGV[4]}
    for i = 5, 4 + nk do a[#a + 1] = ARGV[i] end
    a[#a + 1] = ARGV[at + 4]
    -- The insert's claim for the producer reports no limited keys: its flag asks for none.
    local fl = ARGV[5 + nk + limit]
    if string.sub(fl, 1, 1) == 'l' then fl = string.sub(fl, 2) end
    a[#a + 1] = fl
    redis.call('RPUSH', w, unpack(a))
    redis.call('PEXPIRE', w, math.floor(ttl / 1000) + 1000)
    -- The set outlives its latest-lapsing advertisement by a second, and drops the lapsed ones of
    -- producers gone (a dead process's would otherwise stay until the next insert).
    local wk, t = B .. 'wait', now()
    redis.call('ZREMRANGEBYSCORE', wk, '-inf', '(' .. s(t))
    redis.call('ZADD', wk, t + ttl, p)
    local keep = math.floor(ttl / 1000) + 1000
    if redis.call('PTTL', wk) < keep then redis.call('PEXPIRE', wk, keep) end
  else
    redis.call('ZREM', B .. 'wait', p)
  end
end
return out
`)

// claimBody is the claim (scriptClaim's ARGV), a function of the library's prelude (claimjobs), so
// that the single insert can run it for a waiting producer (see handoff.go).
const claimBody = `
if redis.call('EXISTS', B .. 'paused') == 1 then return {} end
local t = now()
local limit = tonumber(ARGV[1])
local worker = ARGV[2]
local leasefor = tonumber(ARGV[3])
local nk = tonumber(ARGV[4])
-- global: the store may touch keys outside the queue's slot (a single node), for rate limits, tenant
-- weights and tenant limits. On a Redis Cluster the flag is '0', followed, when there are any, by
-- the permits the caller took for rate keys in their own slots (ratelimit.go) and the tenants with
-- a stored limit, as JSON: {g = {rate key -> {n = permits, a = the limit's action when it granted
-- fewer than asked because it is exhausted ('' when it is only busy), u = the end of the window
-- that holds it, µs, 0 for none, m = true when they were all that was asked, so that more may be
-- free once they are used}}, t = {tenant, ...}}. Either is prefixed with 'l' when the caller reads
-- the rate keys the claim finds limited (store.ClaimParams.OnLimited): only then does it gather
-- them (limhits), an HMGET per key and a ZCARD per source taken from that nobody else needs.
local flag = ARGV[5 + nk + limit]
if string.sub(flag, 1, 1) == 'l' then
  flag = string.sub(flag, 2)
  limhits = {'\nlimited'}
else
  limhits = false
end
local global = flag == '1'
local grants, limitedt = none, none
if not global and #flag > 1 then
  grants, limitedt = {}, {}
  local fj = cjson.decode(string.sub(flag, 2))
  if type(fj.g) == 'table' then grants = fj.g end
  if type(fj.t) == 'table' then for _, tn in ipairs(fj.t) do limitedt[tn] = true end end
end
-- perworker: the claim is for several workers, one worker id per slot after the flag.
local perworker = #ARGV > 5 + nk + limit and ARGV[6 + nk + limit] ~= '\nad'
-- At most 1000 per claim, earliest due first, so one call stays short whatever the
-- backlog; Promote (the maintenance pass) moves the rest.
for _, id in ipairs(redis.call('ZRANGEBYSCORE', B .. 'sched', '-inf', s(t), 'LIMIT', '0', '1000')) do
  if unplace(id) then
    redis.call('HSET', jk(id), 'state', 'available')
    place(id)
  else
    unfile(id)
  end
end
local kinds
if nk > 0 then kinds = {unpack(ARGV, 5, 4 + nk)} else kinds = redis.call('SMEMBERS', B .. 'kinds') end
local srcs = {}
for _, kind in ipairs(kinds) do
  for _, rk in ipairs(redis.call('SMEMBERS', B .. 'ks:' .. kind)) do
    srcs[#srcs + 1] = {key = src(kind, rk), rk = rk, kind = kind}
  end
end
local tok = 5 + nk
local out = {}
-- activate makes available job id (fields f) active under this claim (rate key rk, '' for none);
-- with tp (a Redis Cluster's claim), the job takes one of tp's permits of its tenant's limit, and
-- carries tlp until it leaves active, so that its outcome gives the permit back (ratelimit.go).
local started, leaseto = s(t), s(t + leasefor)
local function activate(id, rk, f, tp, a)
  local k = jk(id)
  local w = worker
  if perworker then w = ARGV[tok + limit + 1] end
  unplace(id, f)
  f.state, f.started, f.lease, f.attempt = 'active', started, leaseto, s(num(f.attempt) + 1)
  local tlp = nil
  if tp then
    tp.n = tp.n - 1
    tlp = '1'
  elseif f.tlp == '1' then
    tlp = ''
  end
  if tlp then
    redis.call('HSET', k, 'state', 'active', 'started', started, 'lease', leaseto, 'worker', w,
      'token', ARGV[tok], 'attempt', f.attempt, 'tlp', tlp)
  else
    redis.call('HSET', k, 'state', 'active', 'started', started, 'lease', leaseto, 'worker', w,
      'token', ARGV[tok], 'attempt', f.attempt)
  end
  local tk = ARGV[tok]
  tok = tok + 1
  place(id, f)
  if rk ~= '' and global then rlstarted(rk, t) end
  if not a or f.ukey == '' then
    -- place may have changed the hash (a unique key given up): read it again.
    out[#out + 1] = redis.call('HGETALL', k)
    return
  end
  local n = #a
  a[n + 1], a[n + 2], a[n + 3], a[n + 4], a[n + 5], a[n + 6] = 'state', 'active', 'started', started, 'lease', leaseto
  a[n + 7], a[n + 8], a[n + 9], a[n + 10], a[n + 11], a[n + 12] = 'worker', w, 'token', tk, 'attempt', f.attempt
  if tlp then a[n + 13], a[n + 14] = 'tlp', tlp end
  out[#out + 1] = a
end
-- wants reports whether a Redis Cluster's claim is to ask for permits of key k: it holds none, or
-- has used up permits that were all it asked for (more may be free).
local function wants(k)
  local g = grants[k]
  return not g or (g.n <= 0 and g.m == true)
end
-- needpermits sets needed to {'\nneed', rate key, count, ...}: the rate keys of srcs (a Redis
-- Cluster's claim) that have no permits in this claim, each with how many of its jobs the claim
-- could take (at most upto), for the caller to ask its limit for that many; with tk, also the limit
-- key of the tenant of the job the claim stopped at, when it holds no permits of it either.
local function needpermits(srcs, upto, tk)
  local count, order = {}, {}
  for _, sr in ipairs(srcs) do
    if sr.rk ~= '' and wants(sr.rk) then
      if not count[sr.rk] then order[#order + 1] = sr.rk count[sr.rk] = 0 end
      count[sr.rk] = math.min(upto, count[sr.rk] + redis.call('ZCARD', sr.key))
    end
  end
  if tk and not count[tk] and wants(tk) then
    order[#order + 1] = tk
    count[tk] = upto
  end
  needed = {'\nneed'}
  for _, rk in ipairs(order) do
    needed[#needed + 1] = rk
    needed[#needed + 1] = s(count[rk])
  end
end
-- tenantheld reports whether tenant tn's limit holds back its job with rate key rk (a job with both
-- starts only when both limits have room, and counts against both): on a single node, when the
-- limit has no room at t; on a Redis Cluster, when the permits the caller took of it are used up.
-- The second result is the permits to take one of (a cluster), the third true when the claim must
-- stop to ask for them first (see needpermits). A rate key spelled as the tenant's limit key is one
-- limit: on a single node it is judged as the tenant's (its active jobs across queues; it always
-- waits), the claim not judging it as a key; on a cluster, one permit of that key.
-- tnheld remembers the tenants found held back on a single node: nothing frees room within a claim.
local tnheld = {}
local function tenantheld(tn, rk)
  if not tn or tn == '' then return false end
  if global then
    if not tnheld[tn] and tblocked(tn, t) then tnheld[tn] = true end
    return tnheld[tn] == true
  end
  if not limitedt[tn] or 'tenant:' .. tn == rk then return false end
  local tk = 'tenant:' .. tn
  if wants(tk) then return false, nil, true end
  local tp = grants[tk]
  return tp.n <= 0, tp
end
-- claimplain claims from the sources without a tenant until out holds upto jobs or they run dry.
-- A job whose tenant's limit holds it back stays where it is, and the source's next jobs are read
-- past it (sr.skip counts such jobs at the source's head), so that the key's jobs of other tenants
-- are not stuck behind it; past asidemax of them the source waits for the next claim.
local asidemax = 1000
local function claimplain(upto)
while #out < upto do
  local cands = {}
  for si, sr in ipairs(srcs) do
    if not sr.off then
      local sk = sr.skip or 0
      local ms = redis.call('ZRANGE', sr.key, s(sk), s(sk + upto - #out - 1))
      -- An empty rate key's source left registered (by an expired job taken out below, or by a
      -- version that kept every key) leaves the claim's sources.
      if #ms == 0 and sk == 0 and sr.rk ~= '' then unsource(sr.kind, sr.rk) end
      for _, m in ipairs(ms) do
        cands[#cands + 1] = {m, si}
      end
    end
  end
  if #cands == 0 then break end
  -- One source's members come in order already.
  if cands[#cands][2] ~= cands[1][2] then table.sort(cands, function(a, b) return a[1] < b[1] end) end
  local progress = false
  for _, c in ipairs(cands) do
    if #out == upto then break end
    local sr = srcs[c[2]]
    if not sr.off then
      local id = string.sub(c[1], 27)
      local k = jk(id)
      local f, a = jobof(id)
      local exp = num(f and f.expires)
      local blocked, until_, action = false, 0, ''
      local g, tp, theld = nil, nil, false
      if f and sr.rk ~= '' and not (exp > 0 and exp <= t) then
        local ask
        if global then
          -- A job naming its own tenant's limit key is judged by that limit as its tenant's
          -- (tenantheld), which counts all the tenant's active jobs, not as a key.
          if not (f.tenant and f.tenant ~= '' and 'tenant:' .. f.tenant == sr.rk) then
            blocked, until_, action = rlblocked(sr.rk, t)
          end
        else
          g = grants[sr.rk]
          if wants(sr.rk) then
            ask = true
          elseif g.n <= 0 then
            blocked, until_, action = true, g.u, g.a
          end
        end
        if not blocked and not ask then theld, tp, ask = tenantheld(f.tenant, sr.rk) end
        if ask then
          local tk = nil
          if not global and f.tenant and f.tenant ~= '' and limitedt[f.tenant] and 'tenant:' .. f.tenant ~= sr.rk then
            tk = 'tenant:' .. f.tenant
          end
          -- A Redis Cluster's claim holds no permit of this key or of the job's tenant's limit
          -- (each in its own slot), or has used those it asked for: it stops here, so that no job
          -- after this one is taken before it, and names the keys it needs permits of (see
          -- needpermits); the caller takes them and claims again.
          needpermits(srcs, upto - #out, tk)
          break
        end
      end
      if limhits and blocked and f and not (exp > 0 and exp <= t) then limhit(sr.rk, t, global) end
      if limhits and theld and 'tenant:' .. f.tenant == sr.rk then limhit(sr.rk, t, global) end
      if not f or (exp > 0 and exp <= t) then
        -- Never claimable: it stays available (and counted) until DiscardExpired discards it.
        redis.call('ZREM', sr.key, c[1])
        progress = true
      elseif blocked and action == 'drop' and heldback ~= 'quiet' then
        unplace(id, f)
        redis.call('HSET', k, 'state', 'discarded', 'completed', s(t))
        adderr(id, mkerr(num(f.attempt), t, 'rate_limited',
          'dropped: the limit of rate key ' .. sr.rk .. ' was exhausted'))
        place(id)
        heldback = heldback or {'\nheld'}
        heldback[#heldback + 1] = {'d', unpack(redis.call('HGETALL', k))}
        progress = true
      elseif blocked and action == 'reschedule' and heldback ~= 'quiet' then
        if until_ == 0 then until_ = t + 1000000 end
        unplace(id, f)
        redis.call('HSET', k, 'state', 'scheduled', 'sched', s(until_))
        place(id)
        heldback = heldback or {'\nheld'}
        heldback[#heldback + 1] = {'r', unpack(redis.call('HGETALL', k))}
        progress = true
      elseif blocked then
        sr.off = true
      elseif theld then
        -- Its tenant is at its limit, which always waits: the job stays available.
        sr.skip = (sr.skip or 0) + 1
        if sr.skip >= asidemax then sr.off = true end
        progress = true
      else
        if g then g.n = g.n - 1 end
        sr.took = true
        activate(id, sr.rk, f, tp, a)
        if global and f.tenant and f.tenant ~= '' and 'tenant:' .. f.tenant ~= sr.rk then
          rlstarted('tenant:' .. f.tenant, t)
        end
        progress = true
      end
    end
  end
  if not progress or needed then break end
end
end
-- tenantturn claims tenant tn's first claimable job of the claim's kinds; it returns true when it
-- took one, false when it had none to take, 'gone' when the tenant has no available job left.
local want = {}
for _, kind in ipairs(kinds) do want[kind] = true end
local function tenantturn(tn, tp)
  local tk = B .. 'tk:' .. tn
  while true do
    local best, bestkey = nil, nil
    for _, kind in ipairs(redis.call('SMEMBERS', tk)) do
      local key = tsrc(tn, kind)
      local m = redis.call('ZRANGE', key, 0, 0)[1]
      if not m then
        redis.call('SREM', tk, kind)
      elseif (nk == 0 or want[kind]) and (not best or m < best) then
        best, bestkey = m, key
      end
    end
    if not best then
      if redis.call('SCARD', tk) == 0 then return 'gone' end
      return false
    end
    local id = string.sub(best, 27)
    local f = fields(id)
    local exp = num(f and f.expires)
    if not f or (exp > 0 and exp <= t) then
      -- Never claimable: it stays available (and counted) until DiscardExpired discards it.
      redis.call('ZREM', bestkey, best)
    else
      activate(id, '', f, tp)
      return true
    end
  end
end
-- needtenants sets needed (see needpermits) to tenant first, whose turn it is, and the other limited
-- tenants of the queue's ring that have no permits in this claim, under their limits' keys, each
-- with how many of its jobs the claim could take (at most upto).
local function needtenants(first, upto)
  needed = {'\nneed'}
  local function add(tn)
    local c = 0
    for _, kind in ipairs(redis.call('SMEMBERS', B .. 'tk:' .. tn)) do c = c + redis.call('ZCARD', tsrc(tn, kind)) end
    needed[#needed + 1] = 'tenant:' .. tn
    needed[#needed + 1] = s(math.max(1, math.min(upto, c)))
  end
  add(first)
  for tn in pairs(limitedt) do
    if tn ~= first and wants('tenant:' .. tn) and redis.call('SISMEMBER', B .. 'tset', tn) == 1 then add(tn) end
  end
end
local ring = B .. 'tring'
local fair = redis.call('EXISTS', ring) == 1
if fair then
  -- Fair (see docs/fair-scheduling.md): the ring's tail is the participant whose turn it is; a
  -- tenant of weight w (<prefix>tw) takes up to w jobs in its turn, tused counting them, and the ring
  -- rotates when the turn ends. Weights and tenant limits live in global keys: on a cluster (global
  -- false) the weights come from the queue's copy (B.."tw", kept by tenant.go) and a limited
  -- tenant's turn takes the permits the caller took of its limit (ratelimit.go).
  local idle = 0
  local used = num(redis.call('GET', B .. 'tused'))
  while #out < limit and not needed and idle < redis.call('LLEN', ring) do
    local m = redis.call('LINDEX', ring, -1)
    if m == '\n' then
      redis.call('RPOPLPUSH', ring, ring)
      used = 0
      local before = #out
      claimplain(#out + 1)
      if #out > before then idle = 0 else idle = idle + 1 end
    else
      local r = false
      if global then
        if not tblocked(m, t) then r = tenantturn(m) end
      elseif limitedt[m] then
        -- A Redis Cluster's claim: the tenant's limit is in another slot, so its turn takes the
        -- permits the caller took there, or stops the claim to ask for them (see needpermits).
        local tp = grants['tenant:' .. m]
        if wants('tenant:' .. m) then
          needtenants(m, limit - #out)
          break
        end
        if tp.n > 0 then r = tenantturn(m, tp) end
      else
        r = tenantturn(m)
      end
      if r == 'gone' then
        redis.call('LREM', ring, -1, m)
        redis.call('SREM', B .. 'tset', m)
        used = 0
      elseif r then
        idle = 0
        used = used + 1
        local w
        if global then
          rlstarted('tenant:' .. m, t)
          w = math.max(1, num(redis.call('HGET', G .. 'tw', m)))
        else
          w = math.max(1, num(redis.call('HGET', B .. 'tw', m)))
        end
        if used >= w then
          redis.call('RPOPLPUSH', ring, ring)
          used = 0
        end
      else
        idle = idle + 1
        redis.call('RPOPLPUSH', ring, ring)
        used = 0
      end
    end
    if redis.call('LLEN', ring) <= 1 then
      redis.call('DEL', ring)
      used = 0
      break
    end
  end
  redis.call('SET', B .. 'tused', used)
end
if not needed and (not fair or redis.call('EXISTS', ring) == 0) then claimplain(limit) end
-- The rate keys of the jobs taken that have more jobs waiting (limhits): without room when the
-- claim leaves them so (on a Redis Cluster, when it used up their permits and no more were to be
-- had, or taking them exhausted the limit), else with room.
for _, sr in ipairs(limhits and srcs or {}) do
  if sr.took and sr.rk ~= '' and redis.call('ZCARD', sr.key) > 0 then
    local spent
    if global then
      if string.sub(sr.rk, 1, 7) == 'tenant:' then spent = tblocked(string.sub(sr.rk, 8), t) else spent = rlblocked(sr.rk, t) end
    else
      local g = grants[sr.rk]
      spent = g and g.n <= 0 and (g.m ~= true or g.x == true)
      if not g then spent = nil end
    end
    if spent ~= nil then limhit(sr.rk, t, global, not spent) end
  end
end
settle(t)
-- A dropped workflow job can release a child in this queue (a failure callback). On a single node
-- the channel is reachable: announce it here (a cluster's claim leaves it to the next claim's poll).
if released and global then redis.call('SPUBLISH', G .. '{notify}', cjson.encode({k = 'insert', q = released})) end
return out
`

// scriptFinish applies completions to jobs of one queue still active in the same attempt (and
// under the same claim token, when given). An outcome is applied once: it clears the claim token,
// so the same completion sent again (a worker's retried request, a batch retried after a failure)
// is not applied, as on every store; Finish tells its caller which outcomes a failed batch wrote
// (store.FinishPartialError) so that they are not sent again.
//
// ARGV: n, then per completion 8 values: id, attempt, token ("" for none), state, sched (µs, 0:
// now), error entry JSON ("" for none), flags ("v": a result is given, "r": refund the attempt,
// "x": remove the job if it completes, see store.Completion.Remove) and the result. Returns per
// completion 0 (not applied), 1 (applied) or 2 (applied, and the queue is to be announced: a slot
// of the job's rate key or of its tenant's limit is free, or a workflow child was released in this
// queue) or 3 (as 2, and
// the queue's workflow outbox is to be relayed, see relay.go), plus 4 when the job was removed (the
// caller drops it from the id index), then, on a Redis Cluster, the index (from 1) and rate key of
// each applied completion whose job holds a permit of its key (ratelimit.go), and, when it wrote
// outbox entries, the string "\nrelay" followed by them.
var scriptFinish = newFunc("Finish", `
zq, zkeys = {}, {}
local t = now()
local ts = s(t)
local out, freed = {}, {}
local i = 2
for c = 1, tonumber(ARGV[1]) do
  local id, attempt, token, st, sched, err, flags, result =
    ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], tonumber(ARGV[i + 4]), ARGV[i + 5], ARGV[i + 6], ARGV[i + 7]
  i = i + 8
  local k = jk(id)
  local f = outcomefields(id)
  if not f or f.state ~= 'active' or f.attempt ~= attempt or (token ~= '' and f.token ~= token) then
    out[c] = 0
  else
    out[c] = 1
    unplace(id, f)
    -- One HSET per outcome: the new state, its time, and leaving the run (as leave does); f
    -- follows the hash, for place.
    if st == 'completed' and string.find(flags, 'x', 1, true) and not f.wf
        and not (f.ukey and f.ukey ~= '' and instates(st, f.ustates)) then
      -- Removed (store.Completion.Remove): the hash goes as Cleanup deletes it; the caller drops
      -- the id from the id index (4 marks it).
      redis.call('DEL', k)
      letgo(f.ukey, id)
      out[c] = 5
    elseif st == 'completed' then
      f.completed = ts
      -- No result is "" (Go's ARGV gives it so), which clears one an earlier run left.
      redis.call('HSET', k, 'state', st, 'completed', f.completed, 'lease', '0', 'worker', '', 'token', '', 'result', result)
    elseif st == 'discarded' or st == 'cancelled' then
      f.completed = ts
      redis.call('HSET', k, 'state', st, 'completed', f.completed, 'lease', '0', 'worker', '', 'token', '')
    else
      if sched == 0 or not (st == 'retryable' or st == 'scheduled') then sched = t end
      f.sched = s(sched)
      redis.call('HSET', k, 'state', st, 'sched', f.sched, 'lease', '0', 'worker', '', 'token', '')
    end
    if out[c] == 1 then
      f.state, f.lease, f.token = st, '0', ''
      if err ~= '' then adderr(id, withstart(err, f.started)) end
      if string.find(flags, 'r', 1, true) and tonumber(redis.call('HGET', k, 'max')) < 2147483647 then redis.call('HINCRBY', k, 'max', 1) end
      place(id, f)
    end
    -- A job leaving a limit's count (its rate key's, or its tenant's when the tenant has a limit:
    -- a permit of it on a cluster, the limit itself on a single node) frees room a claim may wait
    -- for: its queue is announced.
    if f.rkey or f.tlp == '1' or (f.tng and f.tng ~= '' and redis.call('HGET', rl('tenant:' .. f.tng), 'set') == '1') then
      out[c] = out[c] + 1
    end
    if f.rkq then freed[#freed + 1] = c freed[#freed + 1] = f.rkey end
    if f.tlp == '1' and f.tnq then freed[#freed + 1] = c freed[#freed + 1] = 'tenant:' .. f.tnq end
  end
end
settle(t)
zflush()
-- Children released in this queue: every applied outcome asks for the queue's announcement; with
-- outcomes to relay to other queues (relay.go), for that too (3).
if released or relay then
  local code = relay and 3 or 2
  for c = 1, #out do if out[c] >= 1 then out[c] = code + (out[c] >= 4 and 4 or 0) end end
end
-- On a Redis Cluster the jobs that held a permit of a rate key give it back (ratelimit.go): their
-- completion's index and rate key follow the outcomes; then the outbox entries written, after a
-- marker, which the caller delivers without reading the outbox (relay.go).
for _, v in ipairs(freed) do out[#out + 1] = v end
if relay then
  out[#out + 1] = '\nrelay'
  for _, e in ipairs(relay) do out[#out + 1] = e end
end
return out
`)

// scriptHeartbeat extends the leases of the listed jobs of one queue that are active under the
// worker (and the claim token, when given), and returns the ids it could not extend.
// ARGV: worker, lease (µs), then id, token pairs.
var scriptHeartbeat = newFunc("Heartbeat", `
local t = now()
local lease = t + tonumber(ARGV[2])
local lost = {}
for i = 3, #ARGV, 2 do
  local id, token = ARGV[i], ARGV[i + 1]
  local f = redis.call('HMGET', jk(id), 'state', 'worker', 'token')
  if f[1] ~= 'active' or f[2] ~= ARGV[1] or (token ~= '' and f[3] ~= token) then
    lost[#lost + 1] = id
  else
    redis.call('HSET', jk(id), 'lease', s(lease))
    redis.call('ZADD', B .. 'lease', s(lease), id)
  end
end
return lost
`)

// scriptRescue takes back up to ARGV[1] active jobs of one queue whose lease ran out: to available
// with a lease_expired error entry, or discarded when their attempts are spent. Returns
// {requeued jobs, discarded jobs, released}, the jobs each a list of HGETALL arrays, released 1
// when workflow children were released in this queue (the caller announces it), 2 when besides the
// queue's workflow outbox is to be relayed (relay.go), else 0.
var scriptRescue = newFunc("Rescue", `
local t = now()
local req, dis = {}, {}
for _, id in ipairs(redis.call('ZRANGEBYSCORE', B .. 'lease', '-inf', '(' .. s(t), 'LIMIT', 0, tonumber(ARGV[1]))) do
  local k = jk(id)
  local f = redis.call('HMGET', k, 'attempt', 'max', 'worker', 'started')
  local attempt = num(f[1])
  if not unplace(id) then
    unfile(id)
  else
    adderr(id, withstart(mkerr(attempt, t, 'lease_expired', 'lease expired: worker ' .. (f[3] or '') .. ' stopped heartbeating'), f[4]))
    leave(id)
    if attempt >= num(f[2]) then
      redis.call('HSET', k, 'state', 'discarded', 'completed', s(t))
      place(id)
      dis[#dis + 1] = redis.call('HGETALL', k)
    else
      redis.call('HSET', k, 'state', 'available', 'sched', s(t))
      place(id)
      req[#req + 1] = redis.call('HGETALL', k)
    end
  end
end
settle(t)
return {req, dis, relay and 2 or released and 1 or 0}
`)

// scriptPromote makes up to ARGV[1] due scheduled and retryable jobs of one queue available and
// returns {how many, 1 when the queue is to be announced}.
var scriptPromote = newFunc("Promote", `
local t = now()
local n = 0
for _, id in ipairs(redis.call('ZRANGEBYSCORE', B .. 'sched', '-inf', s(t), 'LIMIT', 0, tonumber(ARGV[1]))) do
  if unplace(id) then
    redis.call('HSET', jk(id), 'state', 'available')
    place(id)
    n = n + 1
  else
    unfile(id)
  end
end
return {n, n > 0 and 1 or 0}
`)

// scriptExpire discards up to ARGV[1] not-started jobs of one queue whose expiry has passed, each
// with an "expired" error entry, and returns {the jobs discarded, 1 when workflow children were
// released in this queue (to be announced), 2 when besides its workflow outbox is to be relayed
// (relay.go)}.
var scriptExpire = newFunc("Expire", `
local t = now()
local ids = redis.call('ZRANGEBYSCORE', B .. 'exp', '-inf', s(t), 'LIMIT', 0, tonumber(ARGV[1]))
local gone = {}
for _, id in ipairs(ids) do
  local attempt = num(redis.call('HGET', jk(id), 'attempt'))
  if not unplace(id) then
    unfile(id)
  else
    redis.call('HSET', jk(id), 'state', 'discarded', 'completed', s(t))
    adderr(id, mkerr(attempt, t, 'expired', 'job expired before it started'))
    place(id)
    gone[#gone + 1] = redis.call('HGETALL', jk(id))
  end
end
settle(t)
return {gone, relay and 2 or released and 1 or 0}
`)

// scriptCleanup deletes up to ARGV[4] terminal jobs of one queue that finished before their
// state's cut-off (ARGV 1-3: completed, cancelled, discarded, µs; 0 keeps that state), and returns
// {their ids, the workflows gone with their last job} (the caller removes them from the global id
// and workflow indexes). A workflow job a pending child still waits for is kept (see waited).
var scriptCleanup = newFreeingFunc("Cleanup", `
local left = tonumber(ARGV[4])
local gone = {}
local states = {'completed', 'cancelled', 'discarded'}
for si = 1, 3 do
  local cut = tonumber(ARGV[si])
  -- A job a pending child waits for is kept and stepped over (skip), each read bounded by left.
  local skip, budget = 0, left * 4
  while cut > 0 and left > 0 and budget > 0 do
    local ids = redis.call('ZRANGEBYSCORE', B .. 'done:' .. states[si], '-inf', '(' .. s(cut), 'LIMIT', skip, left)
    if #ids == 0 then break end
    budget = budget - #ids
    for _, id in ipairs(ids) do
      if waited(id) then
        skip = skip + 1
      else
        drop(id, unplace(id))
        gone[#gone + 1] = id
        left = left - 1
      end
    end
  end
end
return {gone, dropped}
`)

// scriptCancel cancels job ARGV[1] unless it is terminal. Returns {"nf"}, {"bad", state} or
// {"ok", wasActive, job, released, "", relay, token}: released is the queue of the workflow children
// it released there ("" for none), which the caller announces; relay is 1 when the queue's workflow
// outbox is to be relayed (relay.go); token is the claim token of the run it stopped ("" when the
// job was not active).
var scriptCancel = newFunc("Cancel", `
local id = ARGV[1]
local k = jk(id)
local st = redis.call('HGET', k, 'state')
if not st then return {'nf'} end
if terminal(st) then return {'bad', st} end
local was, tok = 0, ''
if st == 'active' then was, tok = 1, redis.call('HGET', k, 'token') or '' end
local t = now()
if was == 1 then claimcancelled(id, t) end
unplace(id)
redis.call('HSET', k, 'state', 'cancelled', 'completed', s(t))
leave(id)
place(id)
settle(t)
return {'ok', was, redis.call('HGETALL', k), released or '', '', relay and 1 or 0, tok}
`)

// scriptMakeAvailable moves job ARGV[1] to available now if its state is one of ARGV[2..]. A job
// leaving a terminal state starts over (attempt 0, no completion time); a workflow job among them
// goes back to pending while a parent has not finished (see Store.RetryJob). Returns like scriptCancel
// (relay: its state is to be relayed to its children in other queues).
var scriptMakeAvailable = newFunc("MakeAvailable", `
local id = ARGV[1]
local k = jk(id)
local st = redis.call('HGET', k, 'state')
if not st then return {'nf'} end
local ok = false
for i = 2, #ARGV do if ARGV[i] == st then ok = true end end
if not ok then return {'bad', st} end
local t = now()
-- A workflow job retried waits again for its parents, as if it had never left pending, or runs
-- with their results once they have all finished.
local target, pr = 'available', false
if terminal(st) then
  local g = redis.call('HMGET', k, 'parents', 'wfl')
  if g[1] then
    local loc = g[2] and B or false
    if waits(id, loc) then target = 'pending' else pr = results(id, loc) end
  end
end
local f = redis.call('HMGET', k, 'ukey', 'ustates')
if f[1] and f[1] ~= '' and instates(target, f[2]) then
  local hid, hst = holder(f[1], t)
  if hid and hid ~= id then return {'uc', f[1], hid, hst} end
end
unplace(id)
if terminal(st) then redis.call('HSET', k, 'attempt', 0, 'completed', 0) end
redis.call('HSET', k, 'state', target, 'sched', s(t))
if pr then redis.call('HSET', k, 'presults', pr) end
leave(id)
place(id)
-- A job of a split workflow leaving a terminal state tells its children's queues, whose record of
-- its outcome would otherwise stay (relay.go).
local xk = terminal(st) and redis.call('HGET', k, 'xkids')
if xk then outbox(id, xk) end
return {'ok', 0, redis.call('HGETALL', k), '', '', relay and 1 or 0}
`)

// scriptDelete removes job ARGV[1] unless it is active. Returns like scriptCancel, with the job as
// it was, and after released the workflow gone with its last job ("" for none).
var scriptDelete = newFreeingFunc("Delete", `
local id = ARGV[1]
local k = jk(id)
local st = redis.call('HGET', k, 'state')
if not st then return {'nf'} end
if st == 'active' then return {'bad', st} end
if waited(id) then return {'bad', st, 'awaited'} end
local was = redis.call('HGETALL', k)
drop(id, unplace(id))
return {'ok', 0, was, '', dropped[1] or ''}
`)

// scriptNextDue returns the earliest due time (µs) of the queue's scheduled and retryable jobs,
// or the end of the window of an exhausted rate key, or of a tenant's limit, with jobs available in
// the queue when sooner; false when there is none.
//
// On a Redis Cluster (ARGV[1] "c") the limits are in other slots: it returns {earliest due time or
// "", the rate keys with jobs available in the queue..., the limit keys of its tenants with jobs
// available...}, and ratelimit.go asks their limits.
var scriptNextDue = newReadFunc("NextDue", `
local t = now()
local best = false
local cl = ARGV[1] == 'c'
local keys = {''}
local top = redis.call('ZRANGE', B .. 'sched', 0, 0, 'WITHSCORES')
if #top > 0 then best = tonumber(top[2]) end
for _, kind in ipairs(redis.call('SMEMBERS', B .. 'kinds')) do
  for _, rk in ipairs(redis.call('SMEMBERS', B .. 'ks:' .. kind)) do
    if rk ~= '' and redis.call('ZCARD', src(kind, rk)) > 0 then
      if cl then
        keys[#keys + 1] = rk
      else
        local blocked, until_ = rlblocked(rk, t)
        if blocked and until_ > 0 and (not best or until_ < best) then best = until_ end
      end
    end
  end
end
-- The tenants with jobs available in the queue: the end of their limit's full window too (on a
-- cluster their limit keys go with the rate keys).
if cl then
  for _, tn in ipairs(redis.call('SMEMBERS', B .. 'tset')) do keys[#keys + 1] = 'tenant:' .. tn end
  if best then keys[1] = s(best) end
  return keys
end
for _, tn in ipairs(redis.call('SMEMBERS', B .. 'tset')) do
  local f = redis.call('HMGET', rl('tenant:' .. tn), 'set', 'rate', 'period', 'ws', 'wc')
  if f[1] == '1' then
    local rate, per, ws = num(f[2]), num(f[3]), num(f[4])
    if rate > 0 and per > 0 and ws > 0 and t < ws + per and num(f[5]) >= rate and (not best or ws + per < best) then
      best = ws + per
    end
  end
end
if best then return s(best) end
return false
`)

// scriptAvailableByPriority counts the queue's available jobs per priority from its ready sets (the
// claim's sources: k:<kind>\n<rate key> and the tenants' tj:<tenant>\n<kind>), whose members start
// with the rank's 10 digits of priority: per set, it reads the first member at or after a cursor,
// counts that priority's members by ZLEXCOUNT and moves the cursor past them, so a set costs two
// calls per distinct priority, whatever its length. Returns {priority, count, ...}.
var scriptAvailableByPriority = newReadFunc("AvailableByPriority", `
local counts, order = {}, {}
local function tally(key)
  local from = '-'
  while true do
    local m = redis.call('ZRANGE', key, from, '+', 'BYLEX', 'LIMIT', 0, 1)
    if #m == 0 then return end
    local p = string.sub(m[1], 1, 10)
    local n = redis.call('ZLEXCOUNT', key, '[' .. p, '(' .. p .. ':')
    local prio = 2147483647 - tonumber(p)
    if not counts[prio] then
      counts[prio] = 0
      order[#order + 1] = prio
    end
    counts[prio] = counts[prio] + n
    -- Every member of priority p sorts before p .. ':' (':' follows the digits).
    from = '[' .. p .. ':'
  end
end
for _, kind in ipairs(redis.call('SMEMBERS', B .. 'kinds')) do
  for _, rk in ipairs(redis.call('SMEMBERS', B .. 'ks:' .. kind)) do tally(src(kind, rk)) end
end
for _, tn in ipairs(redis.call('SMEMBERS', B .. 'tset')) do
  for _, kind in ipairs(redis.call('SMEMBERS', B .. 'tk:' .. tn)) do tally(tsrc(tn, kind)) end
end
local out = {}
for _, prio in ipairs(order) do
  out[#out + 1] = prio
  out[#out + 1] = counts[prio]
end
return out
`)

// scriptSetWeights replaces the queue's copy of the tenant weights (B.."tw", which the claim reads on
// a Redis Cluster) with ARGV: tenant, weight, ... (see tenant.go).
var scriptSetWeights = newFunc("SetWeights", `
redis.call('DEL', B .. 'tw')
for i = 1, #ARGV, 2 do redis.call('HSET', B .. 'tw', ARGV[i], ARGV[i + 1]) end
return 0
`)

// scriptSetLimit stores limit ARGV[2] under rate key ARGV[1] (KEYS[1] is the prefix).
var scriptSetLimit = newFunc("SetLimit", `
setlimit(ARGV[1], ARGV[2])
return 0
`)

// scriptDeleteLimit removes the limit under rate key ARGV[1] (its jobs' counts stay); returns 0
// when there was none.
var scriptDeleteLimit = newFunc("DeleteLimit", `
if redis.call('HGET', rl(ARGV[1]), 'set') ~= '1' then return 0 end
redis.call('HDEL', rl(ARGV[1]), 'set', 'max', 'rate', 'period', 'onlimit', 'ws', 'wc')
redis.call('ZREM', G .. 'rlkeys', ARGV[1])
return 1
`)

// scriptLimitInfo returns, for each rate key ARGV, {set, max, rate, period, onlimit, ws, wc,
// active, available, due scheduled or retryable} read at one instant. A tenant's limit key counts the
// tenant's jobs across queues (<prefix>tc:<tenant>), whatever their rate keys, since its limit bounds
// them all: its active and available jobs (no index holds a tenant's scheduled jobs by due time, so
// those count once promoted, by the next claim of their queue or the maintenance pass).
var scriptLimitInfo = newReadFunc("LimitInfo", `
local t = now()
local out = {}
for i, rk in ipairs(ARGV) do
  local f = redis.call('HMGET', rl(rk), 'set', 'max', 'rate', 'period', 'onlimit', 'ws', 'wc', 'n:active', 'n:available')
  local per = num(f[4])
  if not (num(f[6]) > 0 and t < num(f[6]) + per) then f[6], f[7] = '0', '0' end
  local tn = string.match(rk, '^tenant:(.*)$')
  if tn then
    local c = redis.call('HMGET', G .. 'tc:' .. tn, 'n:active', 'n:available')
    f[8], f[9], f[10] = c[1] or '0', c[2] or '0', '0'
  else
    f[10] = tostring(redis.call('ZCOUNT', G .. 'rs:' .. rk, '-inf', s(t)))
  end
  for x = 1, 9 do if not f[x] then f[x] = '' end end
  out[i] = f
end
return out
`)

// The scripts below keep a rate key's limit on a Redis Cluster, in the key's own slot (KEYS[1] is
// its prefix, R below: "<prefix>{r:<key>}:", see ratelimit.go), where no queue script can reach it.
// A claim takes permits first (RateAcquire), claims with them, then confirms the permits it used and
// returns the rest (RateConfirm); a job that leaves active gives its permit back (RateRelease), and
// entries whose job left active some other way are found and dropped by RateReconcile:
//
//	R.."rl"   hash  set, max, rate, period (µs), onlimit, ws and wc (the open window's start and count)
//	R.."act"  zset  the key's active jobs ("<id>\n<attempt>") by lease end (µs) as last known
//	R.."res"  zset  permits taken and not yet confirmed ("<reservation>\n<i>") by expiry (µs)

// scriptRateSetLimit stores limit ARGV[1] ("max,rate,period_us,onlimit", see setlimit) in R.
var scriptRateSetLimit = newFunc("RateSetLimit", `
local max, rate, per, on = string.match(ARGV[1], '^(%-?%d+),(%-?%d+),(%-?%d+),(.*)$')
redis.call('HSET', B .. 'rl', 'set', '1', 'max', max, 'rate', rate, 'period', per, 'onlimit', on)
return 0
`)

// scriptRateDeleteLimit removes R's limit (its ledger stays, and keeps counting); returns 0 when
// there was none.
var scriptRateDeleteLimit = newFunc("RateDeleteLimit", `
if redis.call('HGET', B .. 'rl', 'set') ~= '1' then return 0 end
redis.call('HDEL', B .. 'rl', 'set', 'max', 'rate', 'period', 'onlimit', 'ws', 'wc')
return 1
`)

// scriptRateLimitInfo returns R's {set, max, rate, period, onlimit, ws, wc} ("" for unset fields;
// ws and wc '0' when no window is open).
var scriptRateLimitInfo = newReadFunc("RateLimitInfo", `
local t = now()
local f = redis.call('HMGET', B .. 'rl', 'set', 'max', 'rate', 'period', 'onlimit', 'ws', 'wc')
if not (num(f[6]) > 0 and t < num(f[6]) + num(f[4])) then f[6], f[7] = '0', '0' end
for x = 1, 7 do if not f[x] then f[x] = '' end end
return f
`)

// scriptRateAcquire takes up to ARGV[1] permits of R's limit for a claim, as reservation ARGV[2],
// each held until confirmed or until ARGV[3] µs from now. Returns {granted, window, action, until,
// full, max, rate, active, count, spent}: granted is -1 when no limit is stored (nothing to take, nothing to confirm); window, the
// start (µs) of the rate window the permits were counted in ('0' for none); action, the limit's
// on_limit when the key is exhausted once these permits are used (a claim applies it to the key's
// next jobs), "" when more may come free sooner (other claims' permits not yet confirmed); until,
// the end of the window that exhausts it, '0' for none; full, 1 when the confirmed active jobs
// alone reach max_active (the caller then checks them: see RateReconcile); max and rate, the
// limit's; active, its active jobs and held permits, these included; count, the starts counted in
// its open window ('0' for none); spent, 1 when these permits exhaust the limit (as action says,
// whatever the limit's on_limit). Active and count are read only when ARGV[4] is 'l' (the claim
// reports the keys it finds limited, store.ClaimParams.OnLimited), else '0'.
var scriptRateAcquire = newFunc("RateAcquire", `
local t = now()
local want = tonumber(ARGV[1])
local h = B .. 'rl'
local f = redis.call('HMGET', h, 'set', 'max', 'rate', 'period', 'ws', 'wc', 'onlimit')
if f[1] ~= '1' then return {-1, '0', '', '0', 0, '0', '0', '0', '0', 0} end
redis.call('ZREMRANGEBYSCORE', B .. 'res', '-inf', s(t))
local max, rate, per = num(f[2]), num(f[3]), num(f[4])
local n, hard, until_, full, ws = want, false, 0, 0, 0
if max > 0 then
  local used, held = redis.call('ZCARD', B .. 'act'), redis.call('ZCARD', B .. 'res')
  n = math.max(0, math.min(n, max - used - held))
  if used + n >= max and held == 0 then hard = true end
  if used >= max then full = 1 end
end
if rate > 0 and per > 0 and n > 0 then
  ws = num(f[5])
  local wc = num(f[6])
  if not (ws > 0 and t < ws + per) then
    ws, wc = t, 0
    redis.call('HSET', h, 'ws', s(t), 'wc', '0')
  end
  n = math.max(0, math.min(n, rate - wc))
  if wc + n >= rate then hard, until_ = true, ws + per end
  if n > 0 then redis.call('HINCRBY', h, 'wc', n) end
elseif rate > 0 and per > 0 then
  -- Nothing to take (max_active): the window, if one is open and spent, still says when.
  local ows = num(f[5])
  if ows > 0 and t < ows + per and num(f[6]) >= rate then hard, until_ = true, ows + per end
end
local exp = s(t + tonumber(ARGV[3]))
for i = 1, n do redis.call('ZADD', B .. 'res', exp, ARGV[2] .. '\n' .. i) end
local action = ''
if hard then action = f[7] or 'wait' end
-- The limit and its use once these permits are taken, for a claim's store.LimitHit: the active jobs
-- and the permits held (these included), and the starts counted in the window still open.
local act, wc = 0, 0
if max > 0 and ARGV[4] == 'l' then act = redis.call('ZCARD', B .. 'act') + redis.call('ZCARD', B .. 'res') end
if rate > 0 and per > 0 and ARGV[4] == 'l' then
  local w = redis.call('HMGET', h, 'ws', 'wc')
  if num(w[1]) > 0 and t < num(w[1]) + per then wc = num(w[2]) end
end
return {n, s(ws), action, s(until_), full, s(max), s(rate), s(act), s(wc), hard and 1 or 0}
`)

// scriptRateConfirm ends reservation ARGV[1] of ARGV[2] permits counted in the window that started
// at ARGV[3] ('0': none): the jobs that used them (ARGV[4]...: lease end, "<id>\n<attempt>" pairs)
// join the ledger, and the unused permits go back, to the window too while it is the same one.
var scriptRateConfirm = newFunc("RateConfirm", `
local granted = tonumber(ARGV[2])
for i = 1, granted do redis.call('ZREM', B .. 'res', ARGV[1] .. '\n' .. i) end
local used = (#ARGV - 3) / 2
for i = 4, #ARGV, 400 do redis.call('ZADD', B .. 'act', unpack(ARGV, i, math.min(i + 399, #ARGV))) end
local back = granted - used
if back > 0 and ARGV[3] ~= '0' and redis.call('HGET', B .. 'rl', 'ws') == ARGV[3] then
  if redis.call('HINCRBY', B .. 'rl', 'wc', -back) <= 0 then
    -- No start is left in the window: it was never opened.
    redis.call('HSET', B .. 'rl', 'ws', '0', 'wc', '0')
  end
end
return 0
`)

// scriptRateRelease gives back the permits of the jobs ARGV ("<id>\n<attempt>") that left active.
var scriptRateRelease = newFunc("RateRelease", `
local n = 0
for i = 1, #ARGV, 400 do n = n + redis.call('ZREM', B .. 'act', unpack(ARGV, i, math.min(i + 399, #ARGV))) end
return n
`)

// scriptRateReconcile applies what the caller found of ledger entries it read: ARGV are triples of
// entry, the lease end it was read with, and the job's lease end now ('0': the job left active in
// that attempt). An entry left active is dropped and a live one's lease end updated, each only when
// the entry is as it was read (a confirm since may have written it anew). Returns how many it
// dropped.
var scriptRateReconcile = newFunc("RateReconcile", `
local n = 0
for i = 1, #ARGV, 3 do
  local cur = redis.call('ZSCORE', B .. 'act', ARGV[i])
  if cur and cur == ARGV[i + 1] then
    if ARGV[i + 2] == '0' then
      n = n + redis.call('ZREM', B .. 'act', ARGV[i])
    else
      redis.call('ZADD', B .. 'act', ARGV[i + 2], ARGV[i])
    end
  end
end
return n
`)

// scriptInsertWorkflow writes a workflow and all its jobs. ARGV: workflow id, name, type, meta (""
// flag and value), members, n, layout, single node, then per job: queue, id, rate key, rate limit,
// nfields, field, value, ... With layout "1" every job is in KEYS[1]'s queue and the workflow's keys
// are tagged by it (B..'wf:'..id, B..'wfj:'..id; the jobs carry wfl), so the script touches that one
// slot; with "" (a workflow spanning queues, single Redis node only) KEYS[1] is the store's prefix
// and the keys are global. Single node "1" also refuses an id held by a workflow of the global layout
// (one written before workflows were tagged by their queue). Returns "dup" when the workflow exists,
// else the server's now.
var scriptInsertWorkflow = newFunc("InsertWorkflow", `
local W = G
if ARGV[8] == '1' then W = B end
local w = W .. 'wf:' .. ARGV[1]
if redis.call('EXISTS', w) == 1 then return 'dup' end
if W ~= G and ARGV[9] == '1' and redis.call('EXISTS', G .. 'wf:' .. ARGV[1]) == 1 then return 'dup' end
local t = now()
redis.call('HSET', w, 'id', ARGV[1], 'name', ARGV[2], 'type', ARGV[3], 'total', ARGV[6], 'created', s(t), 'cbc', '1')
if ARGV[4] == '1' then redis.call('HSET', w, 'meta', ARGV[5]) end
local i = 10
for _ = 1, tonumber(ARGV[7]) do
  local q, id, rk, lim, nf = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], tonumber(ARGV[i + 4])
  local from, to = i + 5, i + 4 + 2 * nf
  i = to + 1
  inq(q, function()
    if lim ~= '' then setlimit(rk, lim) end
    local k = jk(id)
    redis.call('HSET', k, unpack(ARGV, from, to))
    redis.call('HSET', k, 'created', s(t))
    if num(redis.call('HGET', k, 'sched')) == 0 then redis.call('HSET', k, 'sched', s(t)) end
    place(id)
  end)
  redis.call('ZADD', W .. 'wfj:' .. ARGV[1], 0, id)
end
return t
`)

// scriptRegisterWorkflow records a new workflow in the workflow index (KEYS[2]: id -> its queue
// when its keys are tagged by it, "" for the global layout) and its jobs in the id index (KEYS[1]),
// all or nothing: it changes nothing and returns {"wf"} when the workflow id is indexed already, or
// the first job id indexed already. The registration stays pending (KEYS[3]: id by registration
// time, µs; KEYS[4]: id -> its job ids, JSON) until the workflow is written, so that a registration
// whose writer died can be undone (scriptStaleWorkflows). ARGV: workflow id, its queue or "", then
// job id, queue pairs. These keys carry the id index's key as their hash tag: one slot, one call.
var scriptRegisterWorkflow = newFunc("RegisterWorkflow", `
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 1 then return {'wf'} end
for i = 3, #ARGV, 2 do
  if redis.call('HEXISTS', KEYS[1], ARGV[i]) == 1 then return ARGV[i] end
end
for i = 3, #ARGV, 400 do
  redis.call('HSET', KEYS[1], unpack(ARGV, i, math.min(i + 399, #ARGV)))
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
local jobs = {}
for i = 3, #ARGV, 2 do jobs[#jobs + 1] = ARGV[i] end
redis.call('ZADD', KEYS[3], s(now()), ARGV[1])
redis.call('HSET', KEYS[4], ARGV[1], cjson.encode(jobs))
return false
`)

// scriptStaleWorkflows returns up to ARGV[2] workflow registrations pending for longer than ARGV[1]
// µs, as id, queue pairs (the queue as the workflow index has it, "" for none). KEYS as
// scriptRegisterWorkflow's.
var scriptStaleWorkflows = newReadFunc("StaleWorkflows", `
local out = {}
local cut = now() - tonumber(ARGV[1])
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', '(' .. s(cut), 'LIMIT', 0, tonumber(ARGV[2]))) do
  out[#out + 1] = id
  out[#out + 1] = redis.call('HGET', KEYS[2], id) or ''
end
return out
`)

// scriptSettleRegistrations ends pending workflow registrations. ARGV: id, flag pairs: flag "1"
// undoes one whose workflow was never written (its entry in the workflow index and its jobs' in the
// id index go), "" keeps the registration of a workflow that was. KEYS as scriptRegisterWorkflow's.
var scriptSettleRegistrations = newFreeingFunc("SettleRegistrations", `
for i = 1, #ARGV, 2 do
  local id = ARGV[i]
  if ARGV[i + 1] == '1' then
    local js = redis.call('HGET', KEYS[4], id)
    if js then
      for _, jid in ipairs(cjson.decode(js)) do redis.call('HDEL', KEYS[1], jid) end
    end
    redis.call('HDEL', KEYS[2], id)
  end
  redis.call('ZREM', KEYS[3], id)
  redis.call('HDEL', KEYS[4], id)
end
return 0
`)

// scriptUndoRegistration undoes the pending registration of workflow ARGV[1] (its queue ARGV[2],
// its job ids the rest of ARGV) as scriptSettleRegistrations' flag "1" does, when it is the one
// those arguments made: the workflow index names that queue and the pending registration those
// jobs, in that order. Another insert's registration of the same workflow id is left alone. KEYS
// as scriptRegisterWorkflow's. Returns 1 when it undid it.
var scriptUndoRegistration = newFreeingFunc("UndoRegistration", `
local id = ARGV[1]
local js = redis.call('HGET', KEYS[4], id)
if redis.call('HGET', KEYS[2], id) ~= ARGV[2] or not js then return 0 end
local jobs = {}
for i = 3, #ARGV do jobs[#jobs + 1] = ARGV[i] end
if js ~= cjson.encode(jobs) then return 0 end
for _, jid in ipairs(jobs) do redis.call('HDEL', KEYS[1], jid) end
redis.call('HDEL', KEYS[2], id)
redis.call('ZREM', KEYS[3], id)
redis.call('HDEL', KEYS[4], id)
return 1
`)

// scriptCancelWorkflow cancels every job of workflow ARGV[1] that is not terminal and marks it
// cancelled (the first call's time stays). ARGV[2] is the workflow's queue when its keys are tagged
// by it (KEYS[1] is then that queue's prefix, and the script touches that slot alone), "" for the
// global layout (KEYS[1] the store's prefix; single node). Returns "nf", or {told, jobs}: told is
// {queue, id, token, ...} of the jobs that were active, whose runners are to be told (token: the
// run's claim token), and jobs the hashes (HGETALL) of the jobs it cancelled, as they were before.
var scriptCancelWorkflow = newFunc("CancelWorkflow", `
local loc = ARGV[2] ~= ''
local W = G
if loc then W = B end
local w = W .. 'wf:' .. ARGV[1]
if redis.call('EXISTS', w) == 0 then return 'nf' end
local t = now()
if num(redis.call('HGET', w, 'cancelled')) == 0 then redis.call('HSET', w, 'cancelled', s(t)) end
local told, was = {}, {}
for _, id in ipairs(redis.call('ZRANGE', W .. 'wfj:' .. ARGV[1], 0, -1)) do
  local q = ARGV[2]
  if not loc then q = redis.call('HGET', G .. 'ids', id) end
  if q then
    inq(q, function()
      local st = redis.call('HGET', jk(id), 'state')
      if st and not terminal(st) then
        was[#was + 1] = redis.call('HGETALL', jk(id))
        if st == 'active' then
          told[#told + 1] = q; told[#told + 1] = id
          told[#told + 1] = redis.call('HGET', jk(id), 'token') or ''
          claimcancelled(id, t)
        end
        unplace(id)
        redis.call('HSET', jk(id), 'state', 'cancelled', 'completed', s(t))
        leave(id)
        place(id)
      end
    end)
  end
end
-- Every pending member was cancelled above, so settle releases nothing (it cancels no further).
settle(t)
return {told, was}
`)

// Cron schedules share the hash tag {cron}, so the scripts below touch one slot: KEYS[1] is the
// schedule's hash <prefix>{cron}:s:<name>, KEYS[2] the sorted set <prefix>{cron}:due of enabled
// schedules by next run (µs), KEYS[3] the set <prefix>{cron}:names.

// scriptCronCreate stores a new schedule (ARGV: name, enabled "1"/"0", next µs, field, value...),
// with created set to the server's now; returns 0 when the name is taken.
var scriptCronCreate = newFunc("CronCreate", `
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local t = redis.call('TIME')
redis.call('HSET', KEYS[1], unpack(ARGV, 4))
redis.call('HSET', KEYS[1], 'created', string.format('%d', tonumber(t[1]) * 1000000 + tonumber(t[2])))
if ARGV[2] == '1' then redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1]) end
redis.call('SADD', KEYS[3], ARGV[1])
return 1
`)

// scriptCronDelete removes schedule ARGV[1] and returns it as it was (HGETALL), or an empty list.
var scriptCronDelete = newFunc("CronDelete", `
local was = redis.call('HGETALL', KEYS[1])
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('SREM', KEYS[3], ARGV[1])
return was
`)

// scriptCronAdvance moves schedule ARGV[1] past its due occurrence while it is registration
// ARGV[2] and its next run is still ARGV[3] (µs). ARGV: name, id, from, next, run at, job id.
var scriptCronAdvance = newFunc("CronAdvance", `
local f = redis.call('HMGET', KEYS[1], 'id', 'next', 'enabled')
if f[1] ~= ARGV[2] or f[2] ~= ARGV[3] then return 0 end
redis.call('HSET', KEYS[1], 'next', ARGV[4], 'last', ARGV[5])
if ARGV[6] ~= '' then
  redis.call('HSET', KEYS[1], 'lastjob', ARGV[6])
  redis.call('HINCRBY', KEYS[1], 'runs', 1)
end
if f[3] == '1' then redis.call('ZADD', KEYS[2], ARGV[4], ARGV[1]) end
return 1
`)

// scriptCronSetEnabled pauses (ARGV[2] "0") or resumes (ARGV[2] "1") schedule ARGV[1]; when ARGV[3]
// is not empty it becomes the next run (µs). A paused schedule leaves the due set, a resumed one
// joins it at its next run. Returns the schedule as it now is (HGETALL), or an empty list.
var scriptCronSetEnabled = newFunc("CronSetEnabled", `
if redis.call('EXISTS', KEYS[1]) == 0 then return {} end
redis.call('HSET', KEYS[1], 'enabled', ARGV[2])
if ARGV[3] ~= '' then redis.call('HSET', KEYS[1], 'next', ARGV[3]) end
if ARGV[2] == '1' then
  redis.call('ZADD', KEYS[2], redis.call('HGET', KEYS[1], 'next'), ARGV[1])
else
  redis.call('ZREM', KEYS[2], ARGV[1])
end
return redis.call('HGETALL', KEYS[1])
`)

// scriptSchemaCreate stores a new job schema (KEYS[1] its hash, KEYS[2] the sorted set of URIs
// by creation time, both under the {schema} tag). ARGV: uri, created µs, field, value, ...
// Returns 0 when the URI is taken.
var scriptSchemaCreate = newFunc("SchemaCreate", `
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV, 3))
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
return 1
`)

// scriptSchemaDelete removes job schema ARGV[1] and returns it as it was (HGETALL), or an empty
// list.
var scriptSchemaDelete = newFunc("SchemaDelete", `
local was = redis.call('HGETALL', KEYS[1])
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
return was
`)

// scriptProgress records a progress report (ARGV: id, token or "", value or "", data flag "1"/"",
// data) for the job's current run while it is active (under the token, when given). Progress
// lives in the job's hash (pval, pdata, prun: the run's started time, pat: updated). Within a run
// the value never decreases; a new run starts afresh. Returns 1 when recorded.
var scriptProgress = newFunc("Progress", `
local k = jk(ARGV[1])
local f = redis.call('HMGET', k, 'state', 'token', 'started', 'prun', 'pval')
if f[1] ~= 'active' or (ARGV[2] ~= '' and f[2] ~= ARGV[2]) then return 0 end
local t = now()
local cur = nil
if f[4] == f[3] then cur = tonumber(f[5]) else redis.call('HDEL', k, 'pval', 'pdata') end
if ARGV[3] ~= '' and (not cur or tonumber(ARGV[3]) > cur) then redis.call('HSET', k, 'pval', ARGV[3]) end
if ARGV[4] == '1' then redis.call('HSET', k, 'pdata', ARGV[5]) end
redis.call('HSET', k, 'prun', f[3], 'pat', s(t))
return 1
`)

// scriptPurge removes the jobs ARGV of one queue outright: it undoes the part of a batch, spanning
// several queues, that was written before another queue refused it (plain jobs: Insert refuses
// workflow members, so no workflow is dropped here).
var scriptPurge = newFreeingFunc("Purge", `
for _, id in ipairs(ARGV) do
  local f = unplace(id)
  if f then drop(id, f) end
end
return #ARGV
`)

// scriptElect makes ARGV[1] the leader (KEYS[1]) for ARGV[2] ms if nobody leads or it already
// does: SET NX PX takes a free leadership, PEXPIRE renews the holder's own.
var scriptElect = newFreeingFunc("Elect", `
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
`)

// scriptResign deletes the leadership KEYS[1] if ARGV[1] holds it.
var scriptResign = newFreeingFunc("Resign", `
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 0
`)
