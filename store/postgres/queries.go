package postgres

import (
	"strings"

	"github.com/pronto-jobs/pronto/store"
)

// Every SQL statement of the store lives here (the two PL/pgSQL functions of the rate limits and
// workflows live in migrations/005_features.up.sql). Texts name the schema as {schema} and the
// notification channel as {channel}; New substitutes both once (the schema validated and quoted,
// the channel as a string literal), so no statement is built by concatenation at run time. The
// constants below are concatenated by the compiler; the few statements that carry a unique key
// through a transition are assembled once, at package initialization, by uniqueKeyAfter.

// limitFreedJ is, for a job j leaving active, the key of the limit it frees room under: its rate
// key, else its tenant's limit key (store.TenantLimitKey) when that tenant has a limit stored; NULL
// for none. The queue of such a job is announced (sqlNotifyFinished), so that a claim waiting for
// the room need not wait for its poll: a tenant at its limit ran MaxActive jobs per poll.
const limitFreedJ = `coalesce(j.rate_key, CASE WHEN j.tenant IS NOT NULL AND EXISTS (
		SELECT 1 FROM {schema}.rate_limits tl WHERE tl.key = 'tenant:' || j.tenant)
		THEN 'tenant:' || j.tenant END)`

// limitFreedL is limitFreedJ of a job l.
const limitFreedL = `coalesce(l.rate_key, CASE WHEN l.tenant IS NOT NULL AND EXISTS (
		SELECT 1 FROM {schema}.rate_limits tl WHERE tl.key = 'tenant:' || l.tenant)
		THEN 'tenant:' || l.tenant END)`

// jobCols is the column list every job-returning statement produces, in the order scanJob reads.
const jobCols = `id, kind, queue, args, meta, priority, state, attempt, max_attempts, errors, result,
	tags, retry_policy, timeout_ms, created_at, scheduled_at, started_at, completed_at, expires_at,
	lease_expires_at, worker_id, unique_key, tenant, rate_key, workflow_id, parent_ids, unique_states,
	unique_until, run_on, parent_results, claim_token`

// jobColsJ is jobCols qualified by the alias j, for statements that join jobs with something.
const jobColsJ = `j.id, j.kind, j.queue, j.args, j.meta, j.priority, j.state, j.attempt,
	j.max_attempts, j.errors, j.result, j.tags, j.retry_policy, j.timeout_ms, j.created_at,
	j.scheduled_at, j.started_at, j.completed_at, j.expires_at, j.lease_expires_at, j.worker_id,
	j.unique_key, j.tenant, j.rate_key, j.workflow_id, j.parent_ids, j.unique_states, j.unique_until,
	j.run_on, j.parent_results, j.claim_token`

// jobColsC is jobCols qualified by the alias c.
var jobColsC = "c." + strings.ReplaceAll(strings.Join(strings.Fields(jobCols), " "), ", ", ", c.")

// notifyClaimable is a CTE body announcing, once per queue, the rows of the CTE "changed" (with
// columns queue, state, scheduled_at) that are now claimable or due later. The payload is the
// compact insert notification {"k":"i","q":<queue>,"d":<earliest due in unix ms, 0 when due now>}.
const notifyClaimable = `
	SELECT pg_notify({channel}, '{"k":"i","q":' || to_json(queue)::text || ',"d":' ||
		CASE WHEN bool_or(state = 'available' OR scheduled_at <= now()) THEN '0'
			ELSE floor(extract(epoch FROM min(scheduled_at)) * 1000)::bigint::text END || '}')
	FROM changed
	WHERE state IN ('available', 'retryable', 'scheduled')
	GROUP BY queue`

// uniqueKeyAfter returns the SET item that carries a job's unique key (alias j) through a
// transition to the state given by the SQL expression to.
//
// A job holds its key only in its unique states, so a transition can move it into them from
// outside while another job holds the key: a scheduled job promoted to available when only
// available holds the key, two jobs with the key completing at once when only completed does.
// The unique index would then fail the whole statement, and with it every other job of the batch,
// again on every retry. Instead the entering job gives its key up (it becomes NULL, as a lapsed
// holder's does): it keeps it only if no other job holds the key and no job of the same statement
// with a smaller id enters with it too. A holder whose period ran out holds nothing: the function
// clears its key, as an insert meeting it does, and the entering job keeps its own. rivals is a
// uuid[] expression of the statement's jobs (every job it writes, or NULL when it writes only the
// one), targets a text[] of their next states in the same order, or NULL when they all go to the
// state named by target (see unique_key_taken, migration 020).
//
// Jobs without a key pay one NULL test, and the function behind the rare case costs nothing to set
// up per execution (subqueries written here would: the executor initializes their scans whether
// they run or not). With the default unique states (every state that is not terminal) no
// automatic transition enters them.
func uniqueKeyAfter(to, rivals, targets, target string) string {
	return `unique_key = CASE
		WHEN j.unique_key IS NOT NULL AND (` + to + ` = ANY (j.unique_states)) IS TRUE
			AND (j.state = ANY (j.unique_states)) IS NOT TRUE
			AND {schema}.unique_key_taken(j.id, j.unique_key, ` + rivals + `, ` + targets + `, ` + target + `)
		THEN NULL ELSE j.unique_key END`
}

// rescueTarget is the state Rescue moves an expired job to.
const rescueTarget = `CASE WHEN attempt >= max_attempts THEN 'discarded' ELSE 'available' END`

// claimableKeyed is true when queue $1 has claimable jobs with a rate key: the plain claim leaves
// them to claim_limited. It probes jobs_rate_claim_idx, which is empty without rate keys.
const claimableKeyed = `EXISTS (SELECT 1 FROM {schema}.jobs
		WHERE queue = $1 AND rate_key IS NOT NULL AND state IN ('available', 'scheduled', 'retryable'))`

// claimableKeyedQ3 and claimableTenantQ3 are claimableKeyed and claimableTenant for queue $3.
// cancelledClaimError is the SET item of the errors column of a job j being cancelled: an active
// job's claim ends with a "cancelled" entry (its run may still report; see store.ErrorTypeCancelled).
const cancelledClaimError = `errors = CASE WHEN j.state = 'active' THEN j.errors || jsonb_build_array(jsonb_build_object(
		'attempt', j.attempt, 'at', now(), 'started_at', j.started_at, 'type', '` + store.ErrorTypeCancelled + `',
		'message', 'cancelled while running on worker ' || coalesce(j.worker_id, ''))) ELSE j.errors END`

var (
	claimableKeyedQ3  = strings.ReplaceAll(claimableKeyed, "$1", "$3")
	claimableTenantQ3 = strings.ReplaceAll(claimableTenant, "$1", "$3")
)

// claimableTenant is true when queue $1 has claimable jobs with a tenant (and no rate key): the
// plain claim then leaves the queue to claim_fair_pick. It probes jobs_tenant_claim_idx, which is
// empty without tenants, so a queue without tenants pays one index page per claim. Jobs with both a
// tenant and a rate key are claimableKeyed's, asked first: claim_limited takes them, and enforces
// their tenant's limit with their key's (migration 021).
const claimableTenant = `EXISTS (SELECT 1 FROM {schema}.jobs
		WHERE queue = $1 AND tenant IS NOT NULL AND rate_key IS NULL
			AND state IN ('available', 'scheduled', 'retryable'))`

// claimHead and claimTail are the two halves of the claim statement; sqlClaimKinds adds its kind
// filter between them.
//
// The claim takes no job with a rate key, and nothing at all when sqlClaimPlan found such jobs in
// the queue (pronto.claim_limited 'on'): Claim then calls claim_limited, which takes limited and
// unlimited jobs together in claim order. Likewise with jobs of a tenant ('fair'): Claim then
// takes jobs in turns across tenants (sqlClaimFair). It takes no job of a tenant either: the plan
// and the claim read two snapshots, and a tenant's jobs committed between them must not escape the
// tenant's limits through the plain path (their insert's wake-up brings the next claim to the fair
// one). The test reads the setting once per execution (a one-time filter), and rate_key IS NULL AND
// tenant IS NULL are heap filters on rows the claim fetches anyway.
//
// The claim walks the queue's priorities (prios: the next lower priority with a claimable job, one
// probe of jobs_claim_idx each, as a loose index scan would) and takes each one's due jobs from the
// front of its range, in due-time order, until it has $2: within one priority the index holds the
// jobs due now before those due later, so each range scan stops at the first job not yet due. A
// single scan in (priority, due time) order could not stop there, and passed over the entries of
// every job due later (100,000 retries waiting: 646 buffers a claim), wherever a claim found fewer
// jobs than its limit. The outer LIMIT pulls rows from the walk lazily, so a claim locks only the
// jobs it takes, and a priority's range is scanned only when the ones above it ran out.
const claimHead = `WITH RECURSIVE prios AS (
	(SELECT priority FROM {schema}.jobs
		WHERE queue = $1 AND state IN ('available', 'scheduled', 'retryable') AND held IS NULL
		ORDER BY priority DESC LIMIT 1)
	UNION ALL
	SELECT (SELECT j.priority FROM {schema}.jobs j
		WHERE j.queue = $1 AND j.state IN ('available', 'scheduled', 'retryable') AND j.held IS NULL
			AND j.priority < p.priority
		ORDER BY j.priority DESC LIMIT 1)
	FROM prios p WHERE p.priority IS NOT NULL
), locked AS (
	SELECT c.id FROM prios p CROSS JOIN LATERAL (
	SELECT id FROM {schema}.jobs
	WHERE queue = $1 AND priority = p.priority
		AND state IN ('available', 'scheduled', 'retryable') AND held IS NULL
		AND scheduled_at <= now()
		AND (expires_at IS NULL OR expires_at > now())
		AND rate_key IS NULL AND tenant IS NULL`

var claimTail = `
		AND current_setting('pronto.claim_limited', true) = 'off'
		AND NOT EXISTS (SELECT 1 FROM {schema}.queues q WHERE q.name = $1 AND q.paused)
	ORDER BY scheduled_at, id
	LIMIT $2
	FOR UPDATE SKIP LOCKED) c
	WHERE p.priority IS NOT NULL
	LIMIT $2
)` + claimUpdate

// claimUpdate makes the jobs of the CTE "locked" active and returns them.
var claimUpdate = `
UPDATE {schema}.jobs j
SET state = 'active', attempt = j.attempt + 1, started_at = now(),
	lease_expires_at = now() + $3 * interval '1 microsecond', worker_id = $4,
	claim_token = ` + taggedClaimToken + `,
	` + uniqueKeyAfter(`'active'`, "ARRAY(SELECT id FROM locked)", "NULL", `'active'`) + `
WHERE j.id = ANY(ARRAY(SELECT id FROM locked))
RETURNING ` + jobColsJ

// setClaimTag leaves a claim's tag ($2: 16 hex digits, see lostclaim.go) in the transaction's
// pronto.claim_tag, where taggedClaimToken reads it.
const setClaimTag = `set_config('pronto.claim_tag', $2::text, true)`

// taggedClaimToken is the claim token a claim writes on each job it makes active: the claim's tag
// (pronto.claim_tag) followed by 64 random bits, so that the jobs of a claim whose reply was lost
// can be found (lostclaim.go); a fresh random UUID when the transaction has no tag. Migration 028
// writes the same expression into claim_limited_held.
//
// The tag, 64 bits from the client's crypto/rand, is what sets one claim's tokens apart from any
// other claim's, so fencing holds whatever the rest is. The rest comes from random(), the
// backend's generator (seeded from strong randomness when the backend starts), and not from
// gen_random_uuid(): that one asks OpenSSL for fresh bytes at each call, 2.3 µs of the database's
// CPU a claimed job on this machine against 0.4 µs for two random() calls with the formatting.
const taggedClaimToken = `coalesce((nullif(current_setting('pronto.claim_tag', true), '')
		|| lpad(to_hex((floor(random() * 4294967296)::bigint << 32) | floor(random() * 4294967296)::bigint),
			16, '0'))::uuid, gen_random_uuid())`

// claimTailAd is claimTail advertising the producer for the hand-off (see sqlClaimAd), with the
// parameters of the waiter's id, channel, kinds, lease and lifetime.
func claimTailAd(id, channel, kinds, lease, ttl, pid string) string {
	return strings.Replace(claimTail, claimUpdate, "", 1) + `, claimed AS (` + claimUpdate + `
), ad AS (
	INSERT INTO {schema}.waiters (id, queue, channel, listener_pid, worker_id, kinds, lease_us, free, expires_at)
	SELECT ` + id + `, $1, ` + channel + `, ` + pid + `, $4, ` + kinds + `, ` + lease + `, $2 - count(*),
		now() + ` + ttl + ` * interval '1 microsecond'
	FROM claimed
	HAVING count(*) < $2 AND current_setting('pronto.claim_limited', true) = 'off'
	ON CONFLICT (id) DO UPDATE SET free = EXCLUDED.free, expires_at = EXCLUDED.expires_at,
		listener_pid = EXCLUDED.listener_pid
), unad AS (
	DELETE FROM {schema}.waiters
	WHERE id = ` + id + ` AND ((SELECT count(*) FROM claimed) >= $2
		OR current_setting('pronto.claim_limited', true) <> 'off')
)
SELECT * FROM claimed`
}

// handedPayload is the JSON array of a claimed job (alias c) that a hand-off notification carries,
// in jobCols order with times as Unix microseconds (decodeHanded reads it), or [id, claim token]
// when that would not fit in a notification (8000 bytes).
var handedPayload = `(SELECT CASE WHEN octet_length(p) < 7900 THEN p
	ELSE json_build_array(c.id, c.claim_token)::text END
	FROM (SELECT json_build_array(c.id, c.kind, c.queue, c.args, c.meta, c.priority, c.state, c.attempt,
		c.max_attempts, c.errors, c.result, c.tags, c.retry_policy, c.timeout_ms,
		` + unixMicros("c.created_at", "c.scheduled_at", "c.started_at", "c.completed_at", "c.expires_at",
	"c.lease_expires_at") + `,
		c.worker_id, c.unique_key, c.tenant, c.rate_key, c.workflow_id, c.parent_ids, c.unique_states,
		` + unixMicros("c.unique_until") + `, c.run_on, c.parent_results, c.claim_token)::text AS p) AS x)`

// unixMicros lists the timestamp columns as Unix microseconds (NULL stays NULL).
func unixMicros(cols ...string) string {
	out := make([]string, len(cols))
	for i, c := range cols {
		out[i] = "(extract(epoch FROM " + c + ") * 1000000)::bigint"
	}
	return strings.Join(out, ", ")
}

// boundingLimit is true for a rate_limits row l that bounds its key's jobs: claim_limited takes
// the key's jobs through jobs_rate_claim_idx, up to the key's room.
const boundingLimit = `(l.max_active > 0 OR (l.rate > 0 AND l.period_us > 0))`

// heldAtInsert is the held column of a job inserted with rate key $16: true when a limit bounds
// the key. Such a job is only ever claimed through jobs_rate_claim_idx, so it starts out of
// jobs_claim_idx, where migration 034's claim would have held it the first time the key ran out of
// room: a write per job saved. held is a hint, never a rule: a job held for a limit deleted since is
// returned by the next limited claim (claim_limited step 1b); one inserted just before its key's
// limit is held by the first claim that leaves the key without room. COPY writes the same value,
// worked out in Go from sqlBoundKeys (see insertRow.held).
const heldAtInsert = `CASE WHEN $16::text IS NOT NULL AND EXISTS (SELECT 1 FROM {schema}.rate_limits l
		WHERE l.key = $16::text AND ` + boundingLimit + `) THEN true END`

// heldAtInsertArrays is heldAtInsert for sqlInsertArrays' rows (u).
const heldAtInsertArrays = `CASE WHEN coalesce(u.rate_key, $29::text) IS NOT NULL AND EXISTS (
			SELECT 1 FROM {schema}.rate_limits l
			WHERE l.key = coalesce(u.rate_key, $29::text) AND ` + boundingLimit + `) THEN true END`

// jobValues are the columns and parameters of a job insert: $12 NULL means scheduled now.
const jobValues = ` INTO {schema}.jobs (id, kind, queue, args, meta, priority, state,
	max_attempts, tags, retry_policy, timeout_ms, scheduled_at, expires_at, unique_key, tenant,
	rate_key, workflow_id, parent_ids, unique_states, unique_until, run_on, held)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, coalesce($12, now()), $13, $14, $15, $16,
	$17, $18, $19, $20, $21, ` + heldAtInsert + `)`

const (
	// sqlInsertJob inserts one job.
	sqlInsertJob = `INSERT` + jobValues + `
RETURNING created_at, scheduled_at`

	// sqlInsertUnique inserts one unique job unless a job holds its key, in which case it returns
	// no row. The conflict target names jobs_unique_idx through its predicate.
	sqlInsertUnique = `INSERT` + jobValues + `
ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND state = ANY (unique_states) DO NOTHING
RETURNING created_at, scheduled_at`

	// sqlInsertArrays inserts the plain jobs (no unique key, no workflow fields) given as parallel
	// arrays, one element per job, and returns the transaction's timestamp, which every row took as
	// created_at (and as scheduled_at where $12 is NULL), with the number of rows written. Tags come
	// as one JSON array per job (NULL for none): an array of arrays must be rectangular. A column
	// whose value is the same for every job comes as an empty array, which unnest pads with NULLs,
	// and that one value in its parameter of $16-$29, which coalesce puts in their place (the
	// parameter is NULL when the column's array is full): a batch of like jobs sends, and
	// PostgreSQL reads, the ids and the columns that differ, not 15 arrays of every job.
	sqlInsertArrays = `WITH ins AS (
	INSERT INTO {schema}.jobs (id, kind, queue, args, meta, priority, state, max_attempts, tags,
		retry_policy, timeout_ms, scheduled_at, expires_at, tenant, rate_key, held)
	SELECT id, coalesce(kind, $16::text), coalesce(queue, $17::text), coalesce(args, $18::jsonb),
		coalesce(meta, $19::jsonb), coalesce(priority, $20::int), coalesce(state, $21::text),
		coalesce(max_attempts, $22::int),
		CASE WHEN coalesce(tags, $23::jsonb) IS NULL THEN '{}'::text[]
			ELSE ARRAY(SELECT jsonb_array_elements_text(coalesce(tags, $23::jsonb))) END,
		coalesce(retry_policy, $24::jsonb), coalesce(timeout_ms, $25::bigint),
		coalesce(scheduled_at, $26::timestamptz, now()), coalesce(expires_at, $27::timestamptz),
		coalesce(tenant, $28::text), coalesce(rate_key, $29::text), ` + heldAtInsertArrays + `
	FROM unnest($1::uuid[], $2::text[], $3::text[], $4::jsonb[], $5::jsonb[], $6::int[], $7::text[],
		$8::int[], $9::jsonb[], $10::jsonb[], $11::bigint[], $12::timestamptz[], $13::timestamptz[],
		$14::text[], $15::text[])
		AS u(id, kind, queue, args, meta, priority, state, max_attempts, tags, retry_policy,
			timeout_ms, scheduled_at, expires_at, tenant, rate_key)
	RETURNING 1
)
SELECT now(), count(*) FROM ins`

	// sqlBoundKeys lists which of the rate keys $1 a limit bounds: COPY holds their jobs (see
	// heldAtInsert).
	sqlBoundKeys = `SELECT coalesce(array_agg(l.key), '{}') FROM {schema}.rate_limits l
	WHERE l.key = ANY ($1::text[]) AND ` + boundingLimit

	// sqlUniqueHolder locks the job holding unique key $1, telling whether its period has run out.
	sqlUniqueHolder = `SELECT unique_until IS NOT NULL AND unique_until <= now(), ` + jobCols + `
FROM {schema}.jobs
WHERE unique_key = $1 AND state = ANY (unique_states)
FOR UPDATE`

	// sqlHeldUniqueKeys returns the key and id of each job holding one of the keys $1 now. Its
	// condition is jobs_unique_idx's, so the index finds them.
	sqlHeldUniqueKeys = `SELECT unique_key, id::text FROM {schema}.jobs
WHERE unique_key = ANY ($1::text[]) AND unique_key IS NOT NULL AND state = ANY (unique_states)
	AND (unique_until IS NULL OR unique_until > now())`

	// sqlUniqueRelease clears the unique key of job $1 if its period ran out.
	sqlUniqueRelease = `UPDATE {schema}.jobs SET unique_key = NULL WHERE id = $1 AND unique_until <= now()`

	// sqlUniqueReplace cancels job $1, which holds a key a new job replaces it under: a job already
	// terminal (held in a terminal state) stays as it is. Either way, if it still holds the key in
	// its new state, it gives the key up. It returns the job as it is then.
	sqlUniqueReplace = `UPDATE {schema}.jobs j
SET state = n.state,
	completed_at = CASE WHEN j.state IN ('completed', 'cancelled', 'discarded') THEN j.completed_at ELSE now() END,
	lease_expires_at = NULL, worker_id = NULL,
	` + cancelledClaimError + `,
	unique_key = CASE WHEN n.state = ANY (j.unique_states) THEN NULL ELSE j.unique_key END
FROM (SELECT CASE WHEN state IN ('completed', 'cancelled', 'discarded') THEN state ELSE 'cancelled' END AS state
	FROM {schema}.jobs WHERE id = $1) n
WHERE j.id = $1
RETURNING ` + jobColsJ

	// sqlUniqueConflict finds the job other than $1 holding $1's unique key, after a manual
	// transition of $1 ran into jobs_unique_idx, and whether its period ran out.
	sqlUniqueConflict = `SELECT o.id, o.state, o.unique_key, o.unique_until IS NOT NULL AND o.unique_until <= now()
FROM {schema}.jobs o
JOIN {schema}.jobs j ON j.id = $1
WHERE o.unique_key = j.unique_key AND o.state = ANY (o.unique_states) AND o.id <> j.id`

	// sqlNotify sends one notification on the store's channel.
	sqlNotify = `SELECT pg_notify({channel}, $1)`

	// sqlNotifyMany sends each payload of $1.
	sqlNotifyMany = `SELECT count(pg_notify({channel}, p)) FROM unnest($1::text[]) p`

	// sqlBegin, sqlCommit and sqlRollback delimit the transaction of a COPY insert, pipelined with
	// the statements around them.
	sqlBegin    = `BEGIN`
	sqlCommit   = `COMMIT`
	sqlRollback = `ROLLBACK`

	// sqlNow reads the transaction's timestamp, which is what now() gives every row it writes.
	sqlNow = `SELECT now()`

	// sqlClaimPlan runs just before sqlClaim in the same implicit transaction (one pipelined batch)
	// and fixes its plan: an ordered scan of jobs_claim_idx that stops at the LIMIT, whatever the
	// table's statistics say. Right after a bulk insert, before autovacuum has analyzed the table,
	// the planner otherwise estimates a handful of rows and picks a bitmap scan and a sort of the
	// whole backlog: 200-300 ms per claim of a 100k backlog instead of about 1 ms. With sorting
	// ruled out the generic plan is that same plan, so it is used from the first execution on and
	// claims skip planning. JIT compilation, which costs milliseconds and buys nothing on a plan that
	// touches a few hundred rows, is ruled out too, and so are sequential scans: made on a new,
	// nearly empty table, the generic plan otherwise updated the claimed rows through a sequential
	// scan of the whole table filtered by their ids (51,000 rows read to claim 63, 50-60 ms a claim,
	// until autovacuum next analyzed the table). The settings are local to the transaction and
	// end with it.
	//
	// The claim also commits without waiting for its WAL flush (synchronous_commit off): the worker
	// starts about one disk flush sooner. This loses nothing. If the database crashes before the flush, the claim
	// is undone and the job is available again, so at worst it runs twice, which at-least-once
	// delivery allows anyway. Inserts and outcomes keep the database's durable commit.
	//
	// Its last column tells whether queue $1 has claimable jobs with a rate key ('on'), and leaves
	// the answer in the transaction's pronto.claim_limited for sqlClaim: one probe of an index that
	// is empty without rate keys, and no round trip of its own.
	//
	// $2 is the claim's tag (see lostclaim.go), left in pronto.claim_tag for the claim's tokens.
	sqlClaimPlan = `SELECT set_config('enable_sort', 'off', true), set_config('enable_seqscan', 'off', true),
	set_config('plan_cache_mode', 'force_generic_plan', true), set_config('jit', 'off', true),
	set_config('synchronous_commit', 'off', true), ` + setClaimTag + `,
	set_config('pronto.claim_limited', CASE WHEN ` + claimableKeyed + ` THEN 'on'
		WHEN ` + claimableTenant + ` THEN 'fair' ELSE 'off' END, true)`

	// sqlAsyncCommit makes the implicit transaction it starts commit without waiting for its WAL
	// flush: for writes that a crash may undo without loss (see Promote).
	sqlAsyncCommit = `SELECT set_config('synchronous_commit', 'off', true)`

	// sqlClaimLimitedPlan runs before sqlClaimLimited: the claim's commit and JIT settings. Sorting
	// stays allowed: claim_limited sorts its few candidates. $1 ('on' or 'off') says whether the
	// caller reads the keys the claim leaves limited (store.ClaimParams.OnLimited): only then does
	// claim_limited_untokened work them out (migration 025). A parameter, not two statement texts,
	// so that one prepared statement serves both. claim_limited_untokened's statements run on generic
	// plans by a setting of the function's own (migration 031), as sqlClaimFairPlan asks of
	// claim_fair_pick's.
	// $2 is the claim's tag, as in sqlClaimPlan (claim_limited_held reads it since migration 027).
	sqlClaimLimitedPlan = `SELECT set_config('jit', 'off', true), set_config('synchronous_commit', 'off', true),
	set_config('pronto.want_limited', $1::text, true), ` + setClaimTag + ``

	// sqlClaimFairPlan runs before sqlClaimFair: the claim's commit and JIT settings, and neither
	// sequential scans nor sorts where an index gives the order (see sqlClaimPlan): claim_fair_pick's
	// probes must stay ordered scans of jobs_tenant_claim_idx that stop at their first row, not a
	// sort of a tenant's (or every tenant's) backlog. Generic plans from the first call: planning
	// claim_fair_pick's statements for each call's values took twice as long as running them.
	// Its last column is queue $1's claim mode: 'on' when it has claimable jobs with a rate key
	// (then sqlClaimFair claims nothing and Claim takes the plain path), else 'fair'. Claim sends a
	// queue whose last claim was fair straight here. The probe for tenant jobs is left out: it would
	// pass over the front of the tenants' index range, where the entries of the jobs claimed since
	// the last vacuum lie, and claim_fair_pick passes there anyway. A queue with no tenant job left
	// is claimed once more here, correctly (the jobs without a tenant, in claim order, at most 64),
	// and Claim then forgets that it was fair.
	sqlClaimFairPlan = `SELECT set_config('jit', 'off', true), set_config('synchronous_commit', 'off', true),
	set_config('enable_seqscan', 'off', true), set_config('enable_sort', 'off', true),
	set_config('plan_cache_mode', 'force_generic_plan', true), ` + setClaimTag + `,
	set_config('pronto.claim_limited', CASE WHEN ` + claimableKeyed + ` THEN 'on' ELSE 'fair' END, true)`

	// sqlClaimLimited claims up to $3 jobs of queue $1 (kinds $2, NULL for any) for worker $5 with a
	// lease of $4 microseconds, enforcing the rate limits (see claim_limited). The claimed jobs
	// (active) are followed by those the claim held back, dropped (discarded) or rescheduled
	// (scheduled), as migration 022's claim_limited_held answers. Their claim tokens are written in
	// the update that claims them (migration 033), from the claim's tag as taggedClaimToken.
	sqlClaimLimited = `SELECT ` + jobCols + ` FROM {schema}.claim_limited_held($1, $2, $3, $4, $5)`

	// sqlFinishPlan runs just before sqlFinish in the same implicit transaction and makes it use
	// its generic plan from the first execution on. Left to itself, PostgreSQL compares that plan's
	// cost, estimated for an array of unknown size, with plans made for each batch, may keep
	// planning every call (about half a millisecond, as much as the update itself), and settles
	// differently from one table's statistics to another's.
	//
	// The plan must be a nested loop over the batch's ids into the primary key, fine for any batch
	// and table size, and sequential scans are ruled out to make it so: a connection's generic plan
	// is made once, at its first Finish, and kept until the table is next analyzed. Made on a new,
	// nearly empty table (a fresh deployment, or a backlog loaded faster than autovacuum analyzes),
	// it was a sequential scan of the active jobs joined to the batch by a filter: 1000 outcomes
	// against 2200 active jobs compared 2.2 million pairs, 0.6 s a call, which capped round_trip_max
	// at a few thousand jobs/s. Only this statement's transaction is affected.
	//
	// It also bounds, for the same transaction, how long the finish waits for a row lock another
	// session holds (an operator's SELECT ... FOR UPDATE left open): with no lock_timeout it waited
	// for good, with no error for the completer to isolate the outcome by, and every later outcome
	// stalled behind it. A session's own shorter lock_timeout is kept.
	sqlFinishPlan = `SELECT set_config('plan_cache_mode', 'force_generic_plan', true),
	set_config('enable_seqscan', 'off', true),
	set_config('lock_timeout', CASE WHEN current_setting('lock_timeout')::interval = interval '0'
		OR current_setting('lock_timeout')::interval > interval '` + finishLockTimeout + `'
		THEN '` + finishLockTimeout + `' ELSE current_setting('lock_timeout') END, true)`

	// finishLockTimeout is the longest a Finish waits for a row lock (see sqlFinishPlan): long
	// enough for any lock the store's own statements hold, short enough that the completer isolates
	// the outcome of a row held for good before the other outcomes wait long.
	finishLockTimeout = "5s"

	// sqlNotifyFinished announces, once per queue, the rows of the CTE "changed" (columns queue,
	// state, scheduled_at, rate_key) that are claimable or due later, like notifyClaimable, and also
	// the queue of every job that left active under a limit, due now: the slot it freed can be used
	// at once. Its rate_key column is limitFreedJ's.
	sqlNotifyFinished = `
	SELECT pg_notify({channel}, '{"k":"i","q":' || to_json(queue)::text || ',"d":' ||
		CASE WHEN bool_or(state = 'available' OR scheduled_at <= now() OR rate_key IS NOT NULL) THEN '0'
			ELSE floor(extract(epoch FROM min(scheduled_at)) * 1000)::bigint::text END || '}')
	FROM changed
	WHERE state IN ('available', 'retryable', 'scheduled') OR rate_key IS NOT NULL
	GROUP BY queue`
)

var (
	// sqlClaim claims up to $2 jobs of queue $1 for worker $4 with a lease of $3 microseconds.
	//
	// The due-time test is scheduled_at <= now() for every state: an available job's scheduled_at
	// is never later than the statement that made it available (every transition to available
	// sets it to now(), and an insert of an available job writes now()), so it adds nothing for
	// available jobs, as River's claim has it too. (now() is the claim's transaction's start, a
	// statement before this one in its batch: a job whose insert began after it and committed
	// before this statement's snapshot waits for the next claim, which its insert's notification
	// brings.) Written so, it is a condition on a column of
	// jobs_claim_idx, which the scan tests on each index entry: the jobs scheduled or retrying
	// later, which sit in the same index after the due ones of their priority, are passed over in
	// the index without reading their rows. The test used to be CASE WHEN state = 'available' THEN
	// true ELSE scheduled_at <= now() END, which needs the row's state: a claim that found fewer
	// jobs than its limit read the row of every job of the queue due later, 100,000 rows for a
	// queue with as many retries waiting (TestClaimBesideAScheduledBacklog). An OR of the two
	// (state = 'available' OR scheduled_at <= now()) was worse still: the planner picked a BitmapOr
	// over the claim and due indexes and sorted the whole backlog (22 ms for 20k jobs).
	sqlClaim = claimHead + claimTail

	// sqlClaimFair claims up to $2 jobs of queue $1 (kinds $5, NULL for any) for worker $4 with a
	// lease of $3 microseconds in turns across the queue's tenants (claim_fair_pick), and returns
	// them in the order of the turns.
	sqlClaimFair = `WITH locked AS (
	SELECT f.id, f.ord FROM {schema}.claim_fair_pick($1, $5,
		CASE WHEN current_setting('pronto.claim_limited', true) = 'fair' THEN $2 ELSE 0 END) WITH ORDINALITY AS f(id, ord)
), claimed AS (` + claimUpdate + `
)
SELECT ` + jobColsC + ` FROM claimed c JOIN locked l ON l.id = c.id ORDER BY l.ord`

	// sqlClaimFor is sqlClaim for several workers: the jobs take the entries of $5 in turn (the
	// first len(jobs) of them, one each; $4 is the first).
	sqlClaimFor = claimHead + strings.Replace(claimTail, "worker_id = $4",
		"worker_id = coalesce(($5::text[])[array_position(ARRAY(SELECT id FROM locked), j.id)], $4)", 1)

	// sqlClaimAd is sqlClaim that also advertises its producer for the hand-off (handoff.go) when
	// the claim leaves slots free in a plain queue: waiter $5 on hand-off channel $6, kinds $7
	// (NULL for any), a hand-off lease of $8 microseconds, lapsing after $9 microseconds, with the
	// slots left free and $10 the backend pid of the connection listening on $6. A full claim, or a queue with rate-limited or tenant jobs (which the hand-off
	// does not serve), withdraws it.
	sqlClaimAd = claimHead + claimTailAd("$5", "$6", "$7", "$8", "$9", "$10")

	// sqlClaimKindsAd is sqlClaimKinds advertising as sqlClaimAd does, its arguments one later.
	sqlClaimKindsAd = claimHead + `
		AND kind = ANY($5)` + claimTailAd("$6", "$7", "$5", "$8", "$9", "$10")

	// sqlInsertHanded is sqlInsertJob for a job due now in a single insert (handoff.go): when a
	// producer of its queue waits with a free slot for its kind, and the plain claim would take this
	// job first (no claimable job of the producer's kinds at its priority or above, no paused queue,
	// no rate-limited or tenant jobs in the queue, which their own claims serve), the job is written
	// already claimed by that producer, the one waiting longest whose listener's backend is alive: active, attempt 1, its lease and a
	// fresh claim token, one free slot spent. It is then notified on the producer's hand-off channel
	// as "<waiter id> <job>" (handedPayload). Returns the job's created_at, scheduled_at and state,
	// the notification, and whether a producer with a free slot was passed over all the same (its
	// advertisement locked by a concurrent insert, or a claimable job ahead of this one): a miss
	// that says nothing of the next insert, which handoff.missed must not make skip the hand-off.
	sqlInsertHanded = `WITH ad AS (
	SELECT w.id, w.channel, w.worker_id, w.lease_us FROM {schema}.waiters w
	WHERE w.queue = $3 AND w.expires_at > now() AND w.free > 0 AND (w.kinds IS NULL OR $2 = ANY (w.kinds))
		AND EXISTS (SELECT 1 FROM pg_stat_get_activity(w.listener_pid))
		AND NOT ` + claimableKeyedQ3 + `
		AND NOT ` + claimableTenantQ3 + `
		AND NOT EXISTS (SELECT 1 FROM {schema}.queues q WHERE q.name = $3 AND q.paused)
		AND NOT EXISTS (SELECT 1 FROM {schema}.jobs j
			WHERE j.queue = $3 AND j.priority >= $6
				AND j.state IN ('available', 'scheduled', 'retryable') AND j.held IS NULL
				AND j.scheduled_at <= now()
				AND (j.expires_at IS NULL OR j.expires_at > now())
				AND j.rate_key IS NULL
				AND (w.kinds IS NULL OR j.kind = ANY (w.kinds)))
	ORDER BY w.expires_at
	LIMIT 1
	FOR UPDATE SKIP LOCKED
), ins AS (
	INSERT INTO {schema}.jobs (id, kind, queue, args, meta, priority, state,
		max_attempts, tags, retry_policy, timeout_ms, scheduled_at, expires_at, unique_key, tenant,
		rate_key, workflow_id, parent_ids, unique_states, unique_until, run_on, held,
		attempt, started_at, lease_expires_at, worker_id, claim_token)
	SELECT $1, $2, $3, $4, $5, $6, CASE WHEN ad.id IS NULL THEN $7 ELSE 'active' END, $8, $9, $10, $11,
		coalesce($12, now()), $13, $14, $15, $16, $17, $18, $19, $20, $21,
		CASE WHEN ad.id IS NULL THEN ` + heldAtInsert + ` END,
		CASE WHEN ad.id IS NULL THEN 0 ELSE 1 END, CASE WHEN ad.id IS NOT NULL THEN now() END,
		now() + ad.lease_us * interval '1 microsecond', ad.worker_id,
		CASE WHEN ad.id IS NOT NULL THEN gen_random_uuid() END
	FROM (SELECT) AS one LEFT JOIN ad ON true
	RETURNING ` + jobCols + `
), took AS (
	UPDATE {schema}.waiters w SET free = w.free - 1 FROM ad WHERE w.id = ad.id
)
SELECT c.created_at, c.scheduled_at, c.state,
	CASE WHEN ad.id IS NOT NULL THEN pg_notify(ad.channel, ad.id || ' ' || ` + handedPayload + `) END,
	ad.id IS NULL AND EXISTS (SELECT 1 FROM {schema}.waiters w
		WHERE w.queue = $3 AND w.expires_at > now() AND w.free > 0 AND (w.kinds IS NULL OR $2 = ANY (w.kinds)))
FROM ins c LEFT JOIN ad ON true`

	// sqlHandoffPlan runs before the first sqlInsertHanded of a batch: sqlClaimPlan's plan settings
	// (not its asynchronous commit: the insert's commit stays durable). Without a generic plan,
	// the statement was planned at every execution, which cost more than running it.
	sqlHandoffPlan = `SELECT set_config('enable_sort', 'off', true), set_config('enable_seqscan', 'off', true),
	set_config('plan_cache_mode', 'force_generic_plan', true), set_config('jit', 'off', true)`

	// sqlNotifyUnlessHanded sends the insert notification $1 unless every job $2 was handed off.
	sqlNotifyUnlessHanded = `SELECT pg_notify({channel}, $1)
WHERE EXISTS (SELECT 1 FROM {schema}.jobs WHERE id = ANY ($2::uuid[]) AND state <> 'active')`

	// sqlWithdrawWaiters deletes the advertisements $1.
	sqlWithdrawWaiters = `DELETE FROM {schema}.waiters WHERE id = ANY($1)`

	// sqlHandedJob reads a job handed off under claim token $2 while that claim holds it: the
	// hand-off's notification carries only the id and token of a job too large for a payload.
	sqlHandedJob = `SELECT ` + jobCols + ` FROM {schema}.jobs WHERE id = $1 AND claim_token = $2 AND state = 'active'`

	// sqlReassignWorkers sets the worker ids $2 of the claimed jobs $1, each while it is still
	// active under its claim token (the same position of $3).
	sqlReassignWorkers = `UPDATE {schema}.jobs j SET worker_id = u.worker
FROM unnest($1::uuid[], $2::text[], $3::uuid[]) AS u(id, worker, token)
WHERE j.id = u.id AND j.state = 'active' AND j.claim_token = u.token`

	// sqlClaimKinds is sqlClaim restricted to the kinds in $5.
	sqlClaimKinds = claimHead + `
		AND kind = ANY($5)` + claimTail

	// sqlFinish applies a batch of completions given as parallel arrays, only to jobs still active
	// in the same attempt and, where a claim token is given ($8, NULL elements for none), under
	// that claim, announces the queues it made claimable or whose rate-limited jobs left
	// active, and returns the positions (1-based, in the arrays) of the completions it applied:
	// of two completions of one job, only the one that matched its claim is reported.
	//
	// A completion to completed with remove ($9) deletes its job instead (store.Completion.Remove),
	// unless the job belongs to a workflow or its unique key holds in the completed state: a DELETE
	// writes no new row version and no index entry, where the UPDATE writes both (a drain of
	// removed jobs ran 15% faster, docs/benchmarks.md). The two statements take
	// disjoint rows: removable is the same test on the same snapshot in both.
	sqlFinish = `WITH u AS (
	SELECT * FROM unnest($1::uuid[], $2::int[], $3::text[], $4::timestamptz[], $5::jsonb[],
		$6::jsonb[], $7::bool[], $8::uuid[], $9::bool[]) WITH ORDINALITY
		AS u(id, attempt, state, scheduled_at, error, result, refund, token, remove, ord)
), changed AS (
	UPDATE {schema}.jobs j
	SET state = u.state,
		scheduled_at = CASE
			WHEN u.state IN ('retryable', 'scheduled') THEN coalesce(u.scheduled_at, now())
			WHEN u.state = 'available' THEN now()
			ELSE j.scheduled_at END,
		completed_at = CASE WHEN u.state IN ('completed', 'discarded', 'cancelled') THEN now() END,
		result = CASE WHEN u.state = 'completed' THEN u.result ELSE j.result END,
		errors = CASE WHEN u.error IS NULL THEN j.errors ELSE j.errors || jsonb_build_array(u.error || jsonb_strip_nulls(jsonb_build_object('started_at', j.started_at))) END,
		max_attempts = CASE WHEN u.refund AND j.max_attempts < 2147483647 THEN j.max_attempts + 1 ELSE j.max_attempts END,
		lease_expires_at = NULL,
		worker_id = NULL,
		` + uniqueKeyAfter("u.state", "$1", "$3", "NULL") + `
	FROM u
	WHERE j.id = u.id AND j.state = 'active' AND j.attempt = u.attempt
		AND (u.token IS NULL OR j.claim_token = u.token) AND NOT (` + removable + `)
	RETURNING j.id, j.queue, j.state, j.scheduled_at, ` + limitFreedJ + ` AS rate_key, u.ord
), removed AS (
	DELETE FROM {schema}.jobs j USING u
	WHERE j.id = u.id AND j.state = 'active' AND j.attempt = u.attempt
		AND (u.token IS NULL OR j.claim_token = u.token) AND ` + removable + `
	RETURNING j.id, j.queue, 'completed'::text AS state, j.scheduled_at, ` + limitFreedJ + ` AS rate_key, u.ord
), finished AS (
	SELECT * FROM changed UNION ALL SELECT * FROM removed
), notified AS (` + strings.Replace(sqlNotifyFinished, "FROM changed", "FROM finished", 1) + `
)
SELECT ord FROM finished WHERE (SELECT count(*) FROM notified) >= 0`

	// removable is true for a completion u of job j that deletes it (see sqlFinish).
	removable = `(u.remove IS TRUE AND u.state = 'completed' AND j.workflow_id IS NULL
		AND (j.unique_key IS NULL OR ('completed' = ANY (j.unique_states)) IS NOT TRUE))`

	// sqlHeartbeat extends by $3 microseconds the leases of worker $2's active jobs among $1, each
	// only while it runs under its claim token in $4 (the same order; a NULL element, or a NULL
	// array, leaves the worker id alone to fence), and returns the ids of the jobs still so held.
	// A row another session has locked (an operator's SELECT ... FOR UPDATE, a Finish) is skipped
	// rather than waited for: waiting failed the whole heartbeat on lock_timeout, or blocked it for
	// good, and every other job of the worker lost its lease. A skipped row that still matches on
	// the statement's snapshot is returned as held, only not extended this time; one whose claim
	// moved on is not, so fencing stays exact; that second read is skipped (a one-time filter) when
	// every row was locked. Rows lock in id order (ORDER BY j.id), as Finish
	// locks them, so overlapping statements cannot deadlock.
	sqlHeartbeat = `WITH h AS (
	SELECT * FROM unnest($1::uuid[], $4::uuid[]) AS h(id, token)
), mine AS (
	SELECT j.id FROM {schema}.jobs j JOIN h ON j.id = h.id
	WHERE j.state = 'active' AND j.worker_id = $2 AND (h.token IS NULL OR j.claim_token = h.token)
	ORDER BY j.id
	FOR UPDATE OF j SKIP LOCKED
), extended AS (
	UPDATE {schema}.jobs j
	SET lease_expires_at = now() + $3 * interval '1 microsecond'
	FROM mine WHERE j.id = mine.id
	RETURNING j.id
)
SELECT id FROM extended
UNION ALL
SELECT j.id FROM {schema}.jobs j JOIN h ON j.id = h.id
WHERE j.state = 'active' AND j.worker_id = $2 AND (h.token IS NULL OR j.claim_token = h.token)
	AND j.id NOT IN (SELECT id FROM mine)
	AND (SELECT count(*) FROM mine) < (SELECT count(*) FROM h)`

	// sqlRescue takes back up to $1 active jobs whose lease expired: to available, or discarded when
	// their attempts are spent, each with a lease_expired error entry. Like Finish, it announces the
	// queues of the jobs it makes claimable and of those with a rate key (a freed slot).
	sqlRescue = `WITH expired AS (
	SELECT id, ` + rescueTarget + ` AS target FROM {schema}.jobs
	WHERE state = 'active' AND lease_expires_at < now()
	ORDER BY lease_expires_at
	LIMIT $1
	FOR UPDATE SKIP LOCKED
), updated AS (
	UPDATE {schema}.jobs j
	SET state = ` + rescueTarget + `,
		scheduled_at = CASE WHEN j.attempt >= j.max_attempts THEN j.scheduled_at ELSE now() END,
		completed_at = CASE WHEN j.attempt >= j.max_attempts THEN now() END,
		errors = j.errors || jsonb_build_array(jsonb_build_object(
			'attempt', j.attempt, 'at', now(), 'started_at', j.started_at, 'type', 'lease_expired',
			'message', 'lease expired: worker ' || coalesce(j.worker_id, '') || ' stopped heartbeating')),
		lease_expires_at = NULL,
		worker_id = NULL,
		` + uniqueKeyAfter(rescueTarget, "ARRAY(SELECT id FROM expired ORDER BY id)",
		"ARRAY(SELECT target FROM expired ORDER BY id)", "NULL") + `
	WHERE j.id = ANY(ARRAY(SELECT id FROM expired))
	RETURNING ` + jobColsJ + `
), changed AS (
	SELECT j.queue, j.state, j.scheduled_at, ` + limitFreedJ + ` AS rate_key FROM updated j
), notified AS (` + sqlNotifyFinished + `
)
SELECT * FROM updated WHERE (SELECT count(*) FROM notified) >= 0`

	// sqlRescuePlan runs just before sqlRescue in the same implicit transaction and pins its plan
	// to an ordered scan of jobs_lease_idx that stops at the LIMIT, whatever the statistics say.
	// The leases' index holds, until vacuum, an entry for every claim made since (the finished
	// versions have no lease), so after a busy spell the estimates put thousands of leases in the
	// past. Left to itself the planner then picked a bitmap scan and a sort of them all, or a
	// parallel scan of the whole table, every RescueInterval: 20-75 ms a pass during a drain of
	// 300,000 jobs here, and one pass of 0.5 s. The ordered scan reads what the bitmap scan reads
	// once, then finds those entries marked dead (an index scan marks the entries of rows dead to
	// everyone; a bitmap scan never does) and steps over them without reading the table.
	sqlRescuePlan = `SELECT set_config('enable_sort', 'off', true), set_config('enable_seqscan', 'off', true),
	set_config('enable_bitmapscan', 'off', true), set_config('plan_cache_mode', 'force_generic_plan', true),
	set_config('jit', 'off', true)`

	// sqlPromote moves up to $1 due scheduled and retryable jobs to available, the earliest due
	// first in each queue.
	//
	// jobs_due_idx leads with the queue, so a scan for what is due in every queue at once reads the
	// entries of every job due later too (5 ms and 1,150 buffers beside 300,000 jobs due in an hour,
	// every PromoteInterval, growing with the backlog). Instead the statement walks the queues that
	// have waiting jobs (queues: the next queue after the last, one probe of the index each, as a
	// loose index scan would) and takes each one's due jobs from the front of its range, so a pass
	// reads two index probes per such queue and the entries of the jobs it promotes. Its plan is
	// pinned as the rescue's is (sqlRescuePlan): an ordered scan of the index in each queue.
	sqlPromote = `WITH RECURSIVE queues AS (
	(SELECT queue FROM {schema}.jobs WHERE state IN ('scheduled', 'retryable') ORDER BY queue LIMIT 1)
	UNION ALL
	SELECT (SELECT j.queue FROM {schema}.jobs j
		WHERE j.state IN ('scheduled', 'retryable') AND j.queue > q.queue
		ORDER BY j.queue LIMIT 1)
	FROM queues q WHERE q.queue IS NOT NULL
), due AS (
	SELECT d.id FROM queues q CROSS JOIN LATERAL (
		SELECT j.id, j.scheduled_at FROM {schema}.jobs j
		WHERE j.queue = q.queue AND j.state IN ('scheduled', 'retryable') AND j.scheduled_at <= now()
		ORDER BY j.scheduled_at
		LIMIT $1
		FOR UPDATE SKIP LOCKED) d
	WHERE q.queue IS NOT NULL
	ORDER BY d.scheduled_at
	LIMIT $1
), changed AS (
	UPDATE {schema}.jobs j SET state = 'available',
		` + uniqueKeyAfter(`'available'`, "ARRAY(SELECT id FROM due)", "NULL", `'available'`) + `
	WHERE j.id = ANY(ARRAY(SELECT id FROM due))
	RETURNING j.queue, j.state, j.scheduled_at
), notified AS (` + notifyClaimable + `
)
SELECT count(*) FROM changed WHERE (SELECT count(*) FROM notified) >= 0`

	// sqlDiscardExpired discards up to $1 jobs not yet started whose expires_at has passed, and
	// returns them.
	sqlDiscardExpired = `WITH expired AS (
	SELECT id FROM {schema}.jobs
	WHERE expires_at IS NOT NULL AND expires_at <= now()
		AND state IN ('scheduled', 'available', 'pending', 'retryable')
	ORDER BY expires_at
	LIMIT $1
	FOR UPDATE SKIP LOCKED
)
UPDATE {schema}.jobs j
SET state = 'discarded', completed_at = now(),
	errors = j.errors || jsonb_build_array(jsonb_build_object(
		'attempt', j.attempt, 'at', now(), 'type', 'expired',
		'message', 'job expired before it started')),
	` + uniqueKeyAfter(`'discarded'`, "ARRAY(SELECT id FROM expired)", "NULL", `'discarded'`) + `
WHERE j.id = ANY(ARRAY(SELECT id FROM expired))
RETURNING ` + jobColsJ

	// sqlNextDue finds the earliest due time of the scheduled and retryable jobs of queue $1, or the
	// earlier end of the rate window of a key that is exhausted while jobs of the queue wait for it
	// (a tenant's limit key: while jobs of the tenant do).
	sqlNextDue = `SELECT least(
	(SELECT min(scheduled_at) FROM {schema}.jobs
		WHERE queue = $1 AND state IN ('scheduled', 'retryable')),
	(SELECT min(l.window_start + l.period_us * interval '1 microsecond') FROM {schema}.rate_limits l
		WHERE l.rate > 0 AND l.period_us > 0 AND l.window_count >= l.rate
			AND l.window_start + l.period_us * interval '1 microsecond' > now()
			AND (EXISTS (SELECT 1 FROM {schema}.jobs j
				WHERE j.queue = $1 AND j.rate_key = l.key
					AND j.state IN ('available', 'scheduled', 'retryable')
					AND (j.state = 'available' OR j.scheduled_at <= now()))
			-- A tenant's window (its limit key, store.TenantLimitKey) holds back its jobs without
			-- a rate key too.
			OR (left(l.key, 7) = 'tenant:' AND EXISTS (SELECT 1 FROM {schema}.jobs j
				WHERE j.queue = $1 AND j.tenant = substr(l.key, 8) AND j.rate_key IS NULL
					AND j.state IN ('available', 'scheduled', 'retryable')
					AND j.scheduled_at <= now())))))`

	// sqlCleanup deletes up to $4 terminal jobs finished before their state's cut-off ($1 completed,
	// $2 cancelled, $3 discarded; NULL keeps that state), and the workflows it leaves without jobs. It
	// returns the number of jobs deleted.
	// A workflow job with children still waiting for it is kept: they need its outcome and result.
	sqlCleanup = `WITH old AS (
	SELECT id, workflow_id FROM {schema}.jobs t
	WHERE ((state = 'completed' AND completed_at < $1)
		OR (state = 'cancelled' AND completed_at < $2)
		OR (state = 'discarded' AND completed_at < $3))
		AND ($5::text[] IS NULL OR queue = ANY($5)) AND queue <> ALL($6::text[])
		AND (t.workflow_id IS NULL OR NOT EXISTS (SELECT 1 FROM {schema}.jobs c
			WHERE c.workflow_id = t.workflow_id AND c.state = 'pending' AND t.id = ANY(c.parent_ids)))
	LIMIT $4
	FOR UPDATE SKIP LOCKED
), gone AS (
	DELETE FROM {schema}.jobs WHERE id = ANY(ARRAY(SELECT id FROM old)) RETURNING id, workflow_id
), emptied AS (
	DELETE FROM {schema}.workflows w
	WHERE w.id IN (SELECT workflow_id FROM gone WHERE workflow_id IS NOT NULL)
		AND NOT EXISTS (SELECT 1 FROM {schema}.jobs j
			WHERE j.workflow_id = w.id AND j.id <> ALL(ARRAY(SELECT id FROM gone)))
)
SELECT count(*) FROM gone`

	// sqlGetJob reads one job.
	sqlGetJob = `SELECT ` + jobCols + ` FROM {schema}.jobs WHERE id = $1`

	// sqlListJobs pages through jobs in id order after $4; $1 states, $2 queues and $3 kinds filter
	// when not NULL, as $6 tags does (jobs with every one of them); $5 is the page size. The page
	// ends before id $7 and holds jobs finished in [$8, $9) when those are not NULL.
	sqlListJobs = `SELECT ` + jobCols + ` FROM {schema}.jobs
WHERE id > $4 AND id < $7
	AND ($8::timestamptz IS NULL OR completed_at >= $8) AND ($9::timestamptz IS NULL OR completed_at < $9)
	AND ($1::text[] IS NULL OR state = ANY($1))
	AND ($2::text[] IS NULL OR queue = ANY($2))
	AND ($3::text[] IS NULL OR kind = ANY($3))
	AND ($6::text[] IS NULL OR tags @> $6)
ORDER BY id
LIMIT $5`

	// sqlListWorkflowJobs is sqlListJobs restricted to the jobs of workflow $10.
	sqlListWorkflowJobs = `SELECT ` + jobCols + ` FROM {schema}.jobs
WHERE workflow_id = $10 AND id > $4 AND id < $7
	AND ($8::timestamptz IS NULL OR completed_at >= $8) AND ($9::timestamptz IS NULL OR completed_at < $9)
	AND ($1::text[] IS NULL OR state = ANY($1))
	AND ($2::text[] IS NULL OR queue = ANY($2))
	AND ($3::text[] IS NULL OR kind = ANY($3))
	AND ($6::text[] IS NULL OR tags @> $6)
ORDER BY workflow_id, id
LIMIT $5`

	// sqlListWorkflowJobsDesc is sqlListWorkflowJobs in descending id order, before $4.
	sqlListWorkflowJobsDesc = `SELECT ` + jobCols + ` FROM {schema}.jobs
WHERE workflow_id = $10 AND id < $4 AND id > $7
	AND ($8::timestamptz IS NULL OR completed_at >= $8) AND ($9::timestamptz IS NULL OR completed_at < $9)
	AND ($1::text[] IS NULL OR state = ANY($1))
	AND ($2::text[] IS NULL OR queue = ANY($2))
	AND ($3::text[] IS NULL OR kind = ANY($3))
	AND ($6::text[] IS NULL OR tags @> $6)
ORDER BY workflow_id DESC, id DESC
LIMIT $5`

	// sqlListTenantJobs is sqlListJobs restricted to the jobs of tenant $11 (and of workflow $10 when
	// not NULL), $1 never NULL: one range read of jobs_tenant_state_idx (tenant, state, id) per state,
	// each stopping at the page size, merged in id order. Each state's range is written as row
	// comparisons on (state, id), ordered by (state, id), which only that index provides: with
	// "state = st AND id > $4 ORDER BY id" the planner may walk the primary key instead, filtering,
	// which for a large tenant and a state it has no job in reads the whole id range.
	sqlListTenantJobs = `SELECT ` + jobCols + ` FROM unnest($1::text[]) AS want(st), LATERAL (
	SELECT ` + jobCols + ` FROM {schema}.jobs
	WHERE tenant = $11 AND (state, id) > (want.st, $4) AND (state, id) < (want.st, $7)
		AND ($8::timestamptz IS NULL OR completed_at >= $8) AND ($9::timestamptz IS NULL OR completed_at < $9)
		AND ($2::text[] IS NULL OR queue = ANY($2))
		AND ($3::text[] IS NULL OR kind = ANY($3))
		AND ($6::text[] IS NULL OR tags @> $6)
		AND ($10::text IS NULL OR workflow_id = $10)
	ORDER BY state, id
	LIMIT $5) j
ORDER BY id
LIMIT $5`

	// sqlListTenantJobsDesc is sqlListTenantJobs in descending id order, before $4.
	sqlListTenantJobsDesc = `SELECT ` + jobCols + ` FROM unnest($1::text[]) AS want(st), LATERAL (
	SELECT ` + jobCols + ` FROM {schema}.jobs
	WHERE tenant = $11 AND (state, id) < (want.st, $4) AND (state, id) > (want.st, $7)
		AND ($8::timestamptz IS NULL OR completed_at >= $8) AND ($9::timestamptz IS NULL OR completed_at < $9)
		AND ($2::text[] IS NULL OR queue = ANY($2))
		AND ($3::text[] IS NULL OR kind = ANY($3))
		AND ($6::text[] IS NULL OR tags @> $6)
		AND ($10::text IS NULL OR workflow_id = $10)
	ORDER BY state DESC, id DESC
	LIMIT $5) j
ORDER BY id DESC
LIMIT $5`

	// sqlListJobsDesc is sqlListJobs in descending id order, before $4.
	sqlListJobsDesc = `SELECT ` + jobCols + ` FROM {schema}.jobs
WHERE id < $4 AND id > $7
	AND ($8::timestamptz IS NULL OR completed_at >= $8) AND ($9::timestamptz IS NULL OR completed_at < $9)
	AND ($1::text[] IS NULL OR state = ANY($1))
	AND ($2::text[] IS NULL OR queue = ANY($2))
	AND ($3::text[] IS NULL OR kind = ANY($3))
	AND ($6::text[] IS NULL OR tags @> $6)
ORDER BY id DESC
LIMIT $5`

	// The single-job operations below lock the row, change it only when its state allows, and
	// return the state it was in followed by the changed job (all NULL when refused). No row at all
	// means no such job.

	// sqlCancelJob cancels job $1 unless it is terminal, telling an active job's runner; an active
	// job with a rate key also announces its queue, whose next job may take the freed slot.
	sqlCancelJob = `WITH locked AS (
	SELECT id, state, queue, rate_key, tenant, claim_token FROM {schema}.jobs WHERE id = $1 FOR UPDATE
), updated AS (
	UPDATE {schema}.jobs j
	SET state = 'cancelled', completed_at = now(), lease_expires_at = NULL, worker_id = NULL,
		` + cancelledClaimError + `,
		` + uniqueKeyAfter(`'cancelled'`, "NULL", "NULL", `'cancelled'`) + `
	FROM locked l
	WHERE j.id = $1 AND j.id = l.id AND l.state NOT IN ('completed', 'cancelled', 'discarded')
	RETURNING ` + jobColsJ + `
), notified AS (
	SELECT pg_notify({channel}, '{"k":"c","id":"' || l.id::text || '","t":"' || coalesce(l.claim_token::text, '') || '"}')
	FROM locked l
	WHERE l.state = 'active' AND EXISTS (SELECT 1 FROM updated)
	UNION ALL
	SELECT pg_notify({channel}, '{"k":"i","q":' || to_json(l.queue)::text || ',"d":0}')
	FROM locked l
	WHERE l.state = 'active' AND ` + limitFreedL + ` IS NOT NULL AND EXISTS (SELECT 1 FROM updated)
)
SELECT l.state, updated.* FROM locked l LEFT JOIN updated ON true
WHERE (SELECT count(*) FROM notified) >= 0`

	// sqlRetryJob makes discarded or cancelled job $1 available again with its attempts reset.
	sqlRetryJob = makeAvailable(`attempt = 0, completed_at = NULL, lease_expires_at = NULL, worker_id = NULL`,
		`IN ('discarded', 'cancelled')`)

	// sqlJobParents reads job $1's workflow parents (NULL for none); they never change.
	sqlJobParents = `SELECT parent_ids FROM {schema}.jobs WHERE id = $1`

	// sqlLockParents locks the jobs $1 (a retried job's parents) in id order, so that none of them
	// reaches a terminal state, and decides its pending children, between sqlRetryMember's read of
	// their states and its commit: a parent's transition locks its row before its children's.
	sqlLockParents = `SELECT id FROM {schema}.jobs WHERE id = ANY($1) ORDER BY id FOR SHARE`

	// sqlRetryMember is sqlRetryJob for a workflow job, run after sqlLockParents in one transaction:
	// when its parents' states would keep a pending job waiting (workflow_advance's rules: a parent
	// is unfinished, and none failed unless the job runs on failure or completion; a parent deleted
	// by hand counts as unfinished), the job goes back to pending, to be decided by their outcomes;
	// otherwise it is available with their results.
	sqlRetryMember = `WITH locked AS (
	SELECT id, state, EXISTS (
		SELECT 1 FROM unnest(parent_ids) AS u(id) LEFT JOIN {schema}.jobs p ON p.id = u.id
		WHERE p.state IS NULL OR p.state NOT IN ('completed', 'cancelled', 'discarded')
	) AND (coalesce(run_on, 'success') IN ('failure', 'complete') OR NOT EXISTS (
		SELECT 1 FROM unnest(parent_ids) AS u(id) JOIN {schema}.jobs p ON p.id = u.id
		WHERE p.state IN ('cancelled', 'discarded'))) AS waits
	FROM {schema}.jobs WHERE id = $1 FOR UPDATE
), updated AS (
	UPDATE {schema}.jobs j
	SET state = CASE WHEN l.waits THEN 'pending' ELSE 'available' END, scheduled_at = now(),
		attempt = 0, completed_at = NULL, lease_expires_at = NULL, worker_id = NULL,
		parent_results = CASE WHEN l.waits THEN j.parent_results ELSE (
			SELECT jsonb_agg(p.result ORDER BY u.ord)
			FROM unnest(j.parent_ids) WITH ORDINALITY AS u(id, ord)
			LEFT JOIN {schema}.jobs p ON p.id = u.id) END
	FROM locked l
	WHERE j.id = $1 AND j.id = l.id AND l.state IN ('discarded', 'cancelled')
	RETURNING ` + jobColsJ + `
), changed AS (
	SELECT queue, state, scheduled_at FROM updated
), notified AS (` + notifyClaimable + `
)
SELECT l.state, updated.* FROM locked l LEFT JOIN updated ON true
WHERE (SELECT count(*) FROM notified) >= 0`

	// sqlActivateJob moves pending job $1 to available.
	sqlActivateJob = makeAvailable(``, `= 'pending'`)

	// sqlDeleteJob deletes job $1 unless it is active or a pending workflow child waits for it,
	// returning it as it was.
	sqlDeleteJob = `WITH locked AS (
	SELECT id, state, workflow_id FROM {schema}.jobs WHERE id = $1 FOR UPDATE
), deleted AS (
	DELETE FROM {schema}.jobs j
	USING locked l
	WHERE j.id = $1 AND j.id = l.id AND l.state <> 'active'
		AND (l.workflow_id IS NULL OR NOT EXISTS (SELECT 1 FROM {schema}.jobs c
			WHERE c.workflow_id = l.workflow_id AND c.state = 'pending' AND l.id = ANY(c.parent_ids)))
	RETURNING ` + jobColsJ + `
)
SELECT l.state, deleted.* FROM locked l LEFT JOIN deleted ON true`

	// sqlListQueues counts jobs per queue and state, with the pause flags, including paused queues
	// that have no jobs.
	sqlListQueues = `SELECT coalesce(c.queue, q.name), coalesce(q.paused, false),
	coalesce(c.scheduled, 0), coalesce(c.available, 0), coalesce(c.pending, 0),
	coalesce(c.active, 0), coalesce(c.completed, 0), coalesce(c.retryable, 0),
	coalesce(c.cancelled, 0), coalesce(c.discarded, 0)
FROM (
	SELECT queue,
		` + stateCounts + `
	FROM {schema}.jobs
	GROUP BY queue
) c
FULL JOIN {schema}.queues q ON q.name = c.queue
WHERE c.queue IS NOT NULL OR q.paused
ORDER BY 1`

	// sqlAvailableByPriority counts queue $1's available jobs per priority, over the claim index's
	// range of the queue (jobs_claim_idx) and the queue's held jobs (jobs_held_idx), which the claim
	// index leaves out.
	sqlAvailableByPriority = `SELECT priority, count(*) FROM (
	SELECT priority FROM {schema}.jobs WHERE queue = $1 AND state = 'available' AND held IS NULL
	UNION ALL
	SELECT priority FROM {schema}.jobs WHERE queue = $1 AND state = 'available' AND held
) a
GROUP BY priority`

	// sqlSetPaused sets queue $1's pause flag to $2.
	sqlSetPaused = `INSERT INTO {schema}.queues (name, paused, updated_at) VALUES ($1, $2, now())
ON CONFLICT (name) DO UPDATE SET paused = excluded.paused, updated_at = excluded.updated_at`

	// sqlElect makes $2 the leader of $1 for $3 microseconds when there is no live leader or it
	// already leads; a returned row means it leads.
	sqlElect = `INSERT INTO {schema}.leader AS l (name, leader_id, elected_at, expires_at)
VALUES ($1, $2, now(), now() + $3 * interval '1 microsecond')
ON CONFLICT (name) DO UPDATE
SET leader_id = excluded.leader_id,
	elected_at = CASE WHEN l.leader_id = excluded.leader_id THEN l.elected_at ELSE now() END,
	expires_at = excluded.expires_at
WHERE l.expires_at <= now() OR l.leader_id = excluded.leader_id
RETURNING leader_id`

	// sqlResign ends $2's leadership of $1.
	sqlResign = `DELETE FROM {schema}.leader WHERE name = $1 AND leader_id = $2`
)

// announceKeyQueues is a statement tail that announces, due now, every queue with claimable jobs
// under rate key $1: a limit that changed or went away may let them run.
const announceKeyQueues = `
SELECT pg_notify({channel}, '{"k":"i","q":' || to_json(q.queue)::text || ',"d":0}')
FROM (SELECT DISTINCT queue FROM {schema}.jobs
	WHERE rate_key = $1 AND state IN ('available', 'scheduled', 'retryable')) q`

// rateLimitCols reads a limit with its use: the window only while it is open, the active jobs and
// the waiting ones (available, or scheduled/retryable and due) of every queue. The use of a
// tenant's limit key (store.TenantLimitKey) is the tenant's jobs, whatever their rate keys, since
// its limit bounds them all (counted through jobs_tenant_state_idx); any other key's, the jobs
// naming it.
const rateLimitCols = `l.key, l.max_active, l.rate, l.period_us, l.on_limit,
	CASE WHEN l.window_start + l.period_us * interval '1 microsecond' > now() THEN l.window_start END,
	CASE WHEN l.window_start + l.period_us * interval '1 microsecond' > now() THEN l.window_count ELSE 0 END,
	CASE WHEN left(l.key, 7) = 'tenant:' THEN
		(SELECT count(*) FROM {schema}.jobs WHERE tenant = substr(l.key, 8) AND state = 'active')
	ELSE (SELECT count(*) FROM {schema}.jobs WHERE rate_key = l.key AND state = 'active') END,
	CASE WHEN left(l.key, 7) = 'tenant:' THEN
		(SELECT count(*) FROM {schema}.jobs WHERE tenant = substr(l.key, 8)
			AND state IN ('available', 'scheduled', 'retryable')
			AND (state = 'available' OR scheduled_at <= now()))
	ELSE (SELECT count(*) FROM {schema}.jobs WHERE rate_key = l.key
		AND state IN ('available', 'scheduled', 'retryable')
		AND (state = 'available' OR scheduled_at <= now())) END`

// Rate limit statements.
const (
	// sqlUpsertRateLimit creates or replaces the limit under $1; an unchanged limit is not
	// rewritten.
	sqlUpsertRateLimit = `INSERT INTO {schema}.rate_limits AS r (key, max_active, rate, period_us, on_limit)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (key) DO UPDATE
SET max_active = excluded.max_active, rate = excluded.rate, period_us = excluded.period_us,
	on_limit = excluded.on_limit, updated_at = now()
WHERE (r.max_active, r.rate, r.period_us, r.on_limit)
	IS DISTINCT FROM (excluded.max_active, excluded.rate, excluded.period_us, excluded.on_limit)`

	// sqlSetRateLimit is sqlUpsertRateLimit announcing the queues of the key's claimable jobs.
	sqlSetRateLimit = `WITH up AS (` + sqlUpsertRateLimit + `
RETURNING key
)` + announceKeyQueues

	// sqlDeleteRateLimit removes the limit under $1, returning how many it removed (0 or 1), and
	// announces the queues of the key's claimable jobs when it removed one.
	sqlDeleteRateLimit = `WITH gone AS (
	DELETE FROM {schema}.rate_limits WHERE key = $1 RETURNING key
), notified AS (` + announceKeyQueues + `
	WHERE EXISTS (SELECT 1 FROM gone)
)
SELECT count(*) FROM gone WHERE (SELECT count(*) FROM notified) >= 0`

	// sqlGetRateLimit reads the limit under $1 with its use.
	sqlGetRateLimit = `SELECT ` + rateLimitCols + ` FROM {schema}.rate_limits l WHERE l.key = $1`

	// sqlListRateLimits reads every limit with its use, in key order.
	sqlListRateLimits = `SELECT ` + rateLimitCols + ` FROM {schema}.rate_limits l ORDER BY l.key`
)

// makeAvailable returns the statement that moves job $1 to available now, setting the columns in set
// too, when its state passes the test from (an SQL comparison of the state); it returns the job's
// state before, with the job as updated, or NULLs when it was not moved, and announces the queue.
func makeAvailable(set, from string) string {
	if set != "" {
		set = ", " + set
	}
	return `WITH locked AS (
	SELECT id, state FROM {schema}.jobs WHERE id = $1 FOR UPDATE
), updated AS (
	UPDATE {schema}.jobs j
	SET state = 'available', scheduled_at = now()` + set + `
	FROM locked l
	WHERE j.id = $1 AND j.id = l.id AND l.state ` + from + `
	RETURNING ` + jobColsJ + `
), changed AS (
	SELECT queue, state, scheduled_at FROM updated
), notified AS (` + notifyClaimable + `
)
SELECT l.state, updated.* FROM locked l LEFT JOIN updated ON true
WHERE (SELECT count(*) FROM notified) >= 0`
}

// sqlSetJobPriority sets the priority of job $1 to $2 when it waits to run (available, scheduled,
// pending). It returns the job's priority and state before, with the job as updated, or NULLs when
// its state refused the change; no row for a missing job.
const sqlSetJobPriority = `WITH locked AS (
	SELECT id, state, priority FROM {schema}.jobs WHERE id = $1 FOR UPDATE
), updated AS (
	UPDATE {schema}.jobs j
	SET priority = $2
	FROM locked l
	WHERE j.id = $1 AND j.id = l.id AND l.state IN ('available', 'scheduled', 'pending')
	RETURNING ` + jobColsJ + `
)
SELECT l.priority, l.state, updated.* FROM locked l LEFT JOIN updated ON true`

// stateCounts counts the rows of a group per job state, one column named after each state.
const stateCounts = `count(*) FILTER (WHERE state = 'scheduled') AS scheduled,
		count(*) FILTER (WHERE state = 'available') AS available,
		count(*) FILTER (WHERE state = 'pending') AS pending,
		count(*) FILTER (WHERE state = 'active') AS active,
		count(*) FILTER (WHERE state = 'completed') AS completed,
		count(*) FILTER (WHERE state = 'retryable') AS retryable,
		count(*) FILTER (WHERE state = 'cancelled') AS cancelled,
		count(*) FILTER (WHERE state = 'discarded') AS discarded`

// workflowCols reads a workflow with its members' counts per state, its callbacks' counts (all,
// completed, cancelled, discarded) and the latest completion among its jobs, in one pass over them.
const workflowCols = `w.id, w.name, w.type, w.meta, w.created_at, w.cancelled_at, c.total,
	c.scheduled, c.available, c.pending, c.active, c.completed, c.retryable, c.cancelled,
	c.discarded, c.finished_at, c.cb_total, c.cb_completed, c.cb_cancelled, c.cb_discarded
FROM {schema}.workflows w
CROSS JOIN LATERAL (
	SELECT count(*) FILTER (WHERE run_on IS NULL) AS total,
		count(*) FILTER (WHERE run_on IS NULL AND state = 'scheduled') AS scheduled,
		count(*) FILTER (WHERE run_on IS NULL AND state = 'available') AS available,
		count(*) FILTER (WHERE run_on IS NULL AND state = 'pending') AS pending,
		count(*) FILTER (WHERE run_on IS NULL AND state = 'active') AS active,
		count(*) FILTER (WHERE run_on IS NULL AND state = 'completed') AS completed,
		count(*) FILTER (WHERE run_on IS NULL AND state = 'retryable') AS retryable,
		count(*) FILTER (WHERE run_on IS NULL AND state = 'cancelled') AS cancelled,
		count(*) FILTER (WHERE run_on IS NULL AND state = 'discarded') AS discarded,
		max(completed_at) AS finished_at,
		count(*) FILTER (WHERE run_on IS NOT NULL) AS cb_total,
		count(*) FILTER (WHERE run_on IS NOT NULL AND state = 'completed') AS cb_completed,
		count(*) FILTER (WHERE run_on IS NOT NULL AND state = 'cancelled') AS cb_cancelled,
		count(*) FILTER (WHERE run_on IS NOT NULL AND state = 'discarded') AS cb_discarded
	FROM {schema}.jobs
	WHERE workflow_id = w.id
) c`

// Workflow statements.
const (
	// sqlInsertWorkflow stores workflow $1.
	sqlInsertWorkflow = `INSERT INTO {schema}.workflows (id, name, type, meta) VALUES ($1, $2, $3, $4)
RETURNING created_at`

	// sqlGetWorkflow reads workflow $1.
	sqlGetWorkflow = `SELECT ` + workflowCols + ` WHERE w.id = $1`

	// sqlCancelWorkflow marks workflow $1 cancelled (keeping the time of a first cancellation) and
	// cancels its jobs that are not terminal, locked in id order, telling the runners of the active
	// ones and, as sqlCancelJob does, announcing the queues of the active ones with a rate key (a
	// slot freed). It returns the jobs it cancelled as they were before (the snapshot the CTEs
	// share), in id order. Each cancelled job fires workflow_advance, which finds no pending child
	// left.
	sqlCancelWorkflow = `WITH w AS (
	UPDATE {schema}.workflows SET cancelled_at = coalesce(cancelled_at, now()) WHERE id = $1 RETURNING id
), locked AS (
	SELECT ` + jobColsJ + ` FROM {schema}.jobs j
	WHERE j.workflow_id = $1 AND j.state NOT IN ('completed', 'cancelled', 'discarded')
	ORDER BY j.id
	FOR UPDATE
), cancelled AS (
	UPDATE {schema}.jobs j
	SET state = 'cancelled', completed_at = now(), lease_expires_at = NULL, worker_id = NULL,
		` + cancelledClaimError + `
	FROM locked l
	WHERE j.id = l.id
	RETURNING j.id
), notified AS (
	SELECT pg_notify({channel}, '{"k":"c","id":"' || l.id::text || '","t":"' || coalesce(l.claim_token::text, '') || '"}')
	FROM locked l
	WHERE l.state = 'active'
	UNION ALL
	SELECT pg_notify({channel}, '{"k":"i","q":' || to_json(q.queue)::text || ',"d":0}')
	FROM (SELECT DISTINCT l.queue FROM locked l WHERE l.state = 'active' AND ` + limitFreedL + ` IS NOT NULL) q
)
SELECT ` + jobCols + ` FROM locked WHERE (SELECT count(*) FROM cancelled) + (SELECT count(*) FROM notified) >= 0
ORDER BY id`
)

// cronCols is the column list of every cron statement, in the order scanCron reads.
const cronCols = `name, id, expression, timezone, overlap_policy, template, description, enabled,
	created_at, next_run_at, last_run_at, run_count, last_job_id`

// Cron schedule statements.
const (
	// sqlCronCreate stores a new schedule.
	sqlCronCreate = `INSERT INTO {schema}.cron (name, id, expression, timezone, overlap_policy, template,
	description, enabled, created_at, next_run_at, last_run_at, run_count, last_job_id)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)`
	// sqlCronGet reads one schedule.
	sqlCronGet = `SELECT ` + cronCols + ` FROM {schema}.cron WHERE name = $1`
	// sqlCronList reads every schedule by name.
	sqlCronList = `SELECT ` + cronCols + ` FROM {schema}.cron ORDER BY name`
	// sqlCronDelete removes a schedule, returning it.
	sqlCronDelete = `DELETE FROM {schema}.cron WHERE name = $1 RETURNING ` + cronCols
	// sqlCronDue reads up to $2 enabled schedules due at $1, earliest first.
	sqlCronDue = `SELECT ` + cronCols + ` FROM {schema}.cron
WHERE enabled AND next_run_at <= $1
ORDER BY next_run_at, name
LIMIT $2`
	// sqlCronAdvance moves schedule $1 from $3 to $4 (last run $5), counting job $6 when not NULL,
	// only while it is registration $2 still due at $3.
	sqlCronAdvance = `UPDATE {schema}.cron
SET next_run_at = $4, last_run_at = $5,
	last_job_id = coalesce($6, last_job_id),
	run_count = run_count + CASE WHEN $6::text IS NULL THEN 0 ELSE 1 END
WHERE name = $1 AND id = $2 AND next_run_at = $3`
)

// Settings (workers.go): a jsonb value per key. The swaps compare as jsonb, so the old value as
// GetSetting returned it (jsonb's normalized text) matches; each reports by its row count whether it
// changed the setting.
const (
	sqlGetSetting    = `SELECT value FROM {schema}.settings WHERE key = $1`
	sqlDeleteSetting = `DELETE FROM {schema}.settings WHERE key = $1`
	sqlSetSetting    = `INSERT INTO {schema}.settings (key, value, updated_at) VALUES ($1, $2, now())
	ON CONFLICT (key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at`
	// sqlAddSetting stores $2 under $1 where the key is absent.
	sqlAddSetting = `INSERT INTO {schema}.settings (key, value, updated_at) VALUES ($1, $2, now())
	ON CONFLICT (key) DO NOTHING`
	// sqlSwapSetting stores $3 under $1 where the value is $2.
	sqlSwapSetting = `UPDATE {schema}.settings SET value = $3, updated_at = now() WHERE key = $1 AND value = $2::jsonb`
	// sqlDropSetting removes $1 where its value is $2.
	sqlDropSetting = `DELETE FROM {schema}.settings WHERE key = $1 AND value = $2::jsonb`
)

// Migration statements.
const (
	// sqlMigrateLock serializes migrations of one schema across every client.
	sqlMigrateLock = `SELECT pg_advisory_xact_lock($1)`
	// sqlCreateSchema creates the store's schema when missing.
	sqlCreateSchema = `CREATE SCHEMA IF NOT EXISTS {schema}`
	// sqlSearchPath makes migration files' unqualified names land in the store's schema.
	sqlSearchPath = `SET LOCAL search_path TO {schema}`
	// sqlCreateMigrations creates the table recording applied migrations.
	sqlCreateMigrations = `CREATE TABLE IF NOT EXISTS {schema}.schema_migrations (
	version    integer     PRIMARY KEY,
	name       text        NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT now()
)`
	// sqlMigrationsExist tells whether the migrations table exists.
	sqlMigrationsExist = `SELECT to_regclass($1) IS NOT NULL`
	// sqlAppliedMigrations lists the applied versions.
	sqlAppliedMigrations = `SELECT version, applied_at FROM {schema}.schema_migrations ORDER BY version`
	// sqlRecordMigration records an applied migration.
	sqlRecordMigration = `INSERT INTO {schema}.schema_migrations (version, name) VALUES ($1, $2)`
	// sqlForgetMigration removes a reverted migration.
	sqlForgetMigration = `DELETE FROM {schema}.schema_migrations WHERE version = $1`
)

// queries holds every statement with the schema and channel substituted.
type queries struct {
	claimFair, claimFairPlan, claimFor, reassignWorkers                                 string
	claimAd, claimKindsAd, insertHanded, notifyUnlessHanded, withdrawWaiters, handedJob string
	handoffPlan                                                                         string

	insertJob, insertArrays, boundKeys, notify, now, claimPlan, claim, claimKinds, finish, heartbeat, rescue, promote string
	discardExpired, nextDue, cleanup, getJob, listJobs, listJobsDesc, cancelJob, retryJob                             string
	jobParents, lockParents, retryMember                                                                              string
	activateJob, deleteJob, listQueues, setPaused, elect, resign                                                      string
	availableByPriority                                                                                               string

	insertUnique, uniqueHolder, uniqueRelease, uniqueReplace, uniqueConflict, heldUniqueKeys string
	claimLimitedPlan, claimLimited, listWorkflowJobs, listWorkflowJobsDesc                   string
	listTenantJobs, listTenantJobsDesc                                                       string
	finishPlan, notifyMany                                                                   string

	upsertRateLimit, setRateLimit, deleteRateLimit, getRateLimit, listRateLimits string
	insertWorkflow, getWorkflow, cancelWorkflow                                  string

	cronCreate, cronGet, cronList, cronDelete, cronDue, cronAdvance string

	getSetting, deleteSetting, setSetting, addSetting, swapSetting, dropSetting string

	migrateLock, createSchema, searchPath, createMigrations, migrationsExist string
	appliedMigrations, recordMigration, forgetMigration                      string
}

// newQueries substitutes the quoted schema and the channel literal into every statement through r.
func newQueries(r *strings.Replacer) *queries {
	return &queries{
		insertJob:           r.Replace(sqlInsertJob),
		insertArrays:        r.Replace(sqlInsertArrays),
		boundKeys:           r.Replace(sqlBoundKeys),
		notify:              r.Replace(sqlNotify),
		notifyMany:          r.Replace(sqlNotifyMany),
		now:                 sqlNow,
		claimPlan:           r.Replace(sqlClaimPlan),
		claim:               r.Replace(sqlClaim),
		claimKinds:          r.Replace(sqlClaimKinds),
		claimFor:            r.Replace(sqlClaimFor),
		reassignWorkers:     r.Replace(sqlReassignWorkers),
		claimAd:             r.Replace(sqlClaimAd),
		claimKindsAd:        r.Replace(sqlClaimKindsAd),
		insertHanded:        r.Replace(sqlInsertHanded),
		handoffPlan:         sqlHandoffPlan,
		notifyUnlessHanded:  r.Replace(sqlNotifyUnlessHanded),
		withdrawWaiters:     r.Replace(sqlWithdrawWaiters),
		handedJob:           r.Replace(sqlHandedJob),
		claimFair:           r.Replace(sqlClaimFair),
		claimFairPlan:       r.Replace(sqlClaimFairPlan),
		finish:              r.Replace(sqlFinish),
		heartbeat:           r.Replace(sqlHeartbeat),
		rescue:              r.Replace(sqlRescue),
		promote:             r.Replace(sqlPromote),
		discardExpired:      r.Replace(sqlDiscardExpired),
		nextDue:             r.Replace(sqlNextDue),
		cleanup:             r.Replace(sqlCleanup),
		getJob:              r.Replace(sqlGetJob),
		listJobs:            r.Replace(sqlListJobs),
		listJobsDesc:        r.Replace(sqlListJobsDesc),
		cancelJob:           r.Replace(sqlCancelJob),
		retryJob:            r.Replace(sqlRetryJob),
		jobParents:          r.Replace(sqlJobParents),
		lockParents:         r.Replace(sqlLockParents),
		retryMember:         r.Replace(sqlRetryMember),
		activateJob:         r.Replace(sqlActivateJob),
		deleteJob:           r.Replace(sqlDeleteJob),
		listQueues:          r.Replace(sqlListQueues),
		availableByPriority: r.Replace(sqlAvailableByPriority),
		setPaused:           r.Replace(sqlSetPaused),
		elect:               r.Replace(sqlElect),
		resign:              r.Replace(sqlResign),

		insertUnique:         r.Replace(sqlInsertUnique),
		uniqueHolder:         r.Replace(sqlUniqueHolder),
		heldUniqueKeys:       r.Replace(sqlHeldUniqueKeys),
		uniqueRelease:        r.Replace(sqlUniqueRelease),
		uniqueReplace:        r.Replace(sqlUniqueReplace),
		uniqueConflict:       r.Replace(sqlUniqueConflict),
		claimLimitedPlan:     sqlClaimLimitedPlan,
		finishPlan:           sqlFinishPlan,
		claimLimited:         r.Replace(sqlClaimLimited),
		listWorkflowJobs:     r.Replace(sqlListWorkflowJobs),
		listWorkflowJobsDesc: r.Replace(sqlListWorkflowJobsDesc),
		listTenantJobs:       r.Replace(sqlListTenantJobs),
		listTenantJobsDesc:   r.Replace(sqlListTenantJobsDesc),

		upsertRateLimit: r.Replace(sqlUpsertRateLimit),
		setRateLimit:    r.Replace(sqlSetRateLimit),
		deleteRateLimit: r.Replace(sqlDeleteRateLimit),
		getRateLimit:    r.Replace(sqlGetRateLimit),
		listRateLimits:  r.Replace(sqlListRateLimits),
		insertWorkflow:  r.Replace(sqlInsertWorkflow),
		getWorkflow:     r.Replace(sqlGetWorkflow),
		cancelWorkflow:  r.Replace(sqlCancelWorkflow),

		getSetting:    r.Replace(sqlGetSetting),
		deleteSetting: r.Replace(sqlDeleteSetting),
		setSetting:    r.Replace(sqlSetSetting),
		addSetting:    r.Replace(sqlAddSetting),
		swapSetting:   r.Replace(sqlSwapSetting),
		dropSetting:   r.Replace(sqlDropSetting),

		cronCreate:  r.Replace(sqlCronCreate),
		cronGet:     r.Replace(sqlCronGet),
		cronList:    r.Replace(sqlCronList),
		cronDelete:  r.Replace(sqlCronDelete),
		cronDue:     r.Replace(sqlCronDue),
		cronAdvance: r.Replace(sqlCronAdvance),

		migrateLock:       sqlMigrateLock,
		createSchema:      r.Replace(sqlCreateSchema),
		searchPath:        r.Replace(sqlSearchPath),
		createMigrations:  r.Replace(sqlCreateMigrations),
		migrationsExist:   sqlMigrationsExist,
		appliedMigrations: r.Replace(sqlAppliedMigrations),
		recordMigration:   r.Replace(sqlRecordMigration),
		forgetMigration:   r.Replace(sqlForgetMigration),
	}
}

// Statements of the hand-off's give-back (handoff.go), appended after the others.
var (
	// sqlInsertHandedTagged is sqlInsertHanded whose claim token starts with the waiter's id (16
	// hex digits, then 16 random ones): the jobs handed to a process's waiters are found by their
	// tokens when their notifications may have been lost (see handoff.giveBackLost). The token
	// still fences: 64 random bits and the job's id. A waiter id of another shape (not written by
	// this package's waiters) gets a plain random token: its jobs are rescued as before.
	sqlInsertHandedTagged = strings.Replace(sqlInsertHanded,
		"CASE WHEN ad.id IS NOT NULL THEN gen_random_uuid() END",
		`CASE WHEN ad.id ~ '^[0-9a-f]{16}$' THEN (ad.id || left(md5(gen_random_uuid()::text), 16))::uuid
			WHEN ad.id IS NOT NULL THEN gen_random_uuid() END`, 1)

	// sqlHandedUnserved lists the jobs handed to the waiters $1 (ids) whose hand-off leases were
	// $2 microseconds, still under that first lease: active, the token tagged with the waiter's id,
	// the lease neither ended nor extended by a heartbeat (it ends exactly the hand-off's lease
	// after the insert began it).
	sqlHandedUnserved = `SELECT j.id::text, j.attempt, j.claim_token::text FROM {schema}.jobs j
	JOIN unnest($1::text[], $2::bigint[]) AS w(id, lease_us)
		ON left(replace(j.claim_token::text, '-', ''), 16) = w.id
WHERE j.state = 'active' AND j.lease_expires_at > now()
	AND j.lease_expires_at = j.started_at + w.lease_us * interval '1 microsecond'`
)
