package postgres

import "strings"

// Every SQL statement of the store lives here. Texts name the schema as {schema} and the
// notification channel as {channel}; New substitutes both once (the schema validated and quoted,
// the channel as a string literal), so no statement is built by concatenation at run time. The
// constants below are concatenated by the compiler only.

// jobCols is the column list every job-returning statement produces, in the order scanJob reads.
const jobCols = `id, kind, queue, args, meta, priority, state, attempt, max_attempts, errors, result,
	tags, retry_policy, timeout_ms, created_at, scheduled_at, started_at, completed_at, expires_at,
	lease_expires_at, worker_id, unique_key, tenant, rate_key, workflow_id, parent_ids`

// jobColsJ is jobCols qualified by the alias j, for statements that join jobs with something.
const jobColsJ = `j.id, j.kind, j.queue, j.args, j.meta, j.priority, j.state, j.attempt,
	j.max_attempts, j.errors, j.result, j.tags, j.retry_policy, j.timeout_ms, j.created_at,
	j.scheduled_at, j.started_at, j.completed_at, j.expires_at, j.lease_expires_at, j.worker_id,
	j.unique_key, j.tenant, j.rate_key, j.workflow_id, j.parent_ids`

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

// claimHead and claimTail are the two halves of the claim statement; sqlClaimKinds adds its kind
// filter between them. Both are constants, so each statement's text is fixed at compile time.
const claimHead = `WITH locked AS (
	SELECT id FROM {schema}.jobs
	WHERE queue = $1
		AND state IN ('available', 'scheduled', 'retryable')
		AND (CASE WHEN state = 'available' THEN true ELSE scheduled_at <= now() END)
		AND (expires_at IS NULL OR expires_at > now())`

const claimTail = `
		AND NOT EXISTS (SELECT 1 FROM {schema}.queues q WHERE q.name = $1 AND q.paused)
	ORDER BY priority DESC, scheduled_at, id
	LIMIT $2
	FOR UPDATE SKIP LOCKED
)
UPDATE {schema}.jobs j
SET state = 'active', attempt = j.attempt + 1, started_at = now(),
	lease_expires_at = now() + $3 * interval '1 microsecond', worker_id = $4
WHERE j.id = ANY(ARRAY(SELECT id FROM locked))
RETURNING ` + jobColsJ

const (
	// sqlInsertJob inserts one job; $12 NULL means scheduled now.
	sqlInsertJob = `INSERT INTO {schema}.jobs (id, kind, queue, args, meta, priority, state,
	max_attempts, tags, retry_policy, timeout_ms, scheduled_at, expires_at, unique_key, tenant,
	rate_key, workflow_id, parent_ids)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, coalesce($12, now()), $13, $14, $15, $16,
	$17, $18)
RETURNING created_at, scheduled_at`

	// sqlNotify sends one notification on the store's channel.
	sqlNotify = `SELECT pg_notify({channel}, $1)`

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
	// touches a few hundred rows, is ruled out too. The settings are local to the transaction and
	// end with it.
	//
	// The claim also commits without waiting for its WAL flush (synchronous_commit off): the worker
	// starts about one disk flush sooner. This loses nothing. If the database crashes before the flush, the claim
	// is undone and the job is available again, so at worst it runs twice, which at-least-once
	// delivery allows anyway. Inserts and outcomes keep the database's durable commit.
	sqlClaimPlan = `SELECT set_config('enable_sort', 'off', true),
	set_config('plan_cache_mode', 'force_generic_plan', true), set_config('jit', 'off', true),
	set_config('synchronous_commit', 'off', true)`

	// sqlClaim claims up to $2 jobs of queue $1 for worker $4 with a lease of $3 microseconds.
	// The due-time test is a CASE, not an OR: an OR lets the planner pick a BitmapOr over the claim
	// and due indexes and sort the whole backlog (22 ms for 20k jobs); the CASE keeps an ordered scan
	// of jobs_claim_idx that stops at the LIMIT (1.4 ms).
	sqlClaim = claimHead + claimTail

	// sqlClaimKinds is sqlClaim restricted to the kinds in $5.
	sqlClaimKinds = claimHead + `
		AND kind = ANY($5)` + claimTail

	// sqlFinish applies a batch of completions given as parallel arrays, only to jobs still active
	// in the same attempt, announces the queues it made claimable, and returns the applied ids.
	sqlFinish = `WITH u AS (
	SELECT * FROM unnest($1::uuid[], $2::int[], $3::text[], $4::timestamptz[], $5::jsonb[],
		$6::jsonb[], $7::bool[]) AS u(id, attempt, state, scheduled_at, error, result, refund)
), changed AS (
	UPDATE {schema}.jobs j
	SET state = u.state,
		scheduled_at = CASE
			WHEN u.state IN ('retryable', 'scheduled') THEN coalesce(u.scheduled_at, now())
			WHEN u.state = 'available' THEN now()
			ELSE j.scheduled_at END,
		completed_at = CASE WHEN u.state IN ('completed', 'discarded', 'cancelled') THEN now() END,
		result = CASE WHEN u.state = 'completed' THEN u.result ELSE j.result END,
		errors = CASE WHEN u.error IS NULL THEN j.errors ELSE j.errors || jsonb_build_array(u.error) END,
		max_attempts = CASE WHEN u.refund THEN j.max_attempts + 1 ELSE j.max_attempts END,
		lease_expires_at = NULL,
		worker_id = NULL
	FROM u
	WHERE j.id = u.id AND j.state = 'active' AND j.attempt = u.attempt
	RETURNING j.id, j.queue, j.state, j.scheduled_at
), notified AS (` + notifyClaimable + `
)
SELECT id FROM changed WHERE (SELECT count(*) FROM notified) >= 0`

	// sqlHeartbeat extends the leases of worker $2's active jobs in $1 by $3 microseconds.
	sqlHeartbeat = `UPDATE {schema}.jobs
SET lease_expires_at = now() + $3 * interval '1 microsecond'
WHERE id = ANY($1) AND state = 'active' AND worker_id = $2
RETURNING id`

	// sqlRescue takes back up to $1 active jobs whose lease expired: to available, or discarded when
	// their attempts are spent, each with a lease_expired error entry.
	sqlRescue = `WITH expired AS (
	SELECT id FROM {schema}.jobs
	WHERE state = 'active' AND lease_expires_at < now()
	ORDER BY lease_expires_at
	LIMIT $1
	FOR UPDATE SKIP LOCKED
), updated AS (
	UPDATE {schema}.jobs j
	SET state = CASE WHEN j.attempt >= j.max_attempts THEN 'discarded' ELSE 'available' END,
		scheduled_at = CASE WHEN j.attempt >= j.max_attempts THEN j.scheduled_at ELSE now() END,
		completed_at = CASE WHEN j.attempt >= j.max_attempts THEN now() END,
		errors = j.errors || jsonb_build_array(jsonb_build_object(
			'attempt', j.attempt, 'at', now(), 'type', 'lease_expired',
			'message', 'lease expired: worker ' || coalesce(j.worker_id, '') || ' stopped heartbeating')),
		lease_expires_at = NULL,
		worker_id = NULL
	WHERE j.id = ANY(ARRAY(SELECT id FROM expired))
	RETURNING ` + jobColsJ + `
), changed AS (
	SELECT queue, state, scheduled_at FROM updated
), notified AS (` + notifyClaimable + `
)
SELECT * FROM updated WHERE (SELECT count(*) FROM notified) >= 0`

	// sqlPromote moves up to $1 due scheduled and retryable jobs to available.
	sqlPromote = `WITH due AS (
	SELECT id FROM {schema}.jobs
	WHERE state IN ('scheduled', 'retryable') AND scheduled_at <= now()
	ORDER BY scheduled_at
	LIMIT $1
	FOR UPDATE SKIP LOCKED
), changed AS (
	UPDATE {schema}.jobs j SET state = 'available'
	WHERE j.id = ANY(ARRAY(SELECT id FROM due))
	RETURNING j.queue, j.state, j.scheduled_at
), notified AS (` + notifyClaimable + `
)
SELECT count(*) FROM changed WHERE (SELECT count(*) FROM notified) >= 0`

	// sqlDiscardExpired discards up to $1 jobs not yet started whose expires_at has passed.
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
		'message', 'job expired before it started'))
WHERE j.id = ANY(ARRAY(SELECT id FROM expired))`

	// sqlNextDue finds the earliest due time of the scheduled and retryable jobs of queue $1.
	sqlNextDue = `SELECT min(scheduled_at) FROM {schema}.jobs
WHERE queue = $1 AND state IN ('scheduled', 'retryable')`

	// sqlCleanup deletes up to $4 terminal jobs finished before their state's cut-off ($1 completed,
	// $2 cancelled, $3 discarded; NULL keeps that state).
	sqlCleanup = `WITH old AS (
	SELECT id FROM {schema}.jobs
	WHERE (state = 'completed' AND completed_at < $1)
		OR (state = 'cancelled' AND completed_at < $2)
		OR (state = 'discarded' AND completed_at < $3)
	LIMIT $4
	FOR UPDATE SKIP LOCKED
)
DELETE FROM {schema}.jobs WHERE id = ANY(ARRAY(SELECT id FROM old))`

	// sqlGetJob reads one job.
	sqlGetJob = `SELECT ` + jobCols + ` FROM {schema}.jobs WHERE id = $1`

	// sqlListJobs pages through jobs in id order after $4; $1 states, $2 queues and $3 kinds filter
	// when not NULL; $5 is the page size.
	sqlListJobs = `SELECT ` + jobCols + ` FROM {schema}.jobs
WHERE id > $4
	AND ($1::text[] IS NULL OR state = ANY($1))
	AND ($2::text[] IS NULL OR queue = ANY($2))
	AND ($3::text[] IS NULL OR kind = ANY($3))
ORDER BY id
LIMIT $5`

	// sqlListJobsDesc is sqlListJobs in descending id order, before $4.
	sqlListJobsDesc = `SELECT ` + jobCols + ` FROM {schema}.jobs
WHERE id < $4
	AND ($1::text[] IS NULL OR state = ANY($1))
	AND ($2::text[] IS NULL OR queue = ANY($2))
	AND ($3::text[] IS NULL OR kind = ANY($3))
ORDER BY id DESC
LIMIT $5`

	// The single-job operations below lock the row, change it only when its state allows, and
	// return the state it was in followed by the changed job (all NULL when refused). No row at all
	// means no such job.

	// sqlCancelJob cancels job $1 unless it is terminal, telling an active job's runner.
	sqlCancelJob = `WITH locked AS (
	SELECT id, state FROM {schema}.jobs WHERE id = $1 FOR UPDATE
), updated AS (
	UPDATE {schema}.jobs j
	SET state = 'cancelled', completed_at = now(), lease_expires_at = NULL, worker_id = NULL
	FROM locked l
	WHERE j.id = $1 AND j.id = l.id AND l.state NOT IN ('completed', 'cancelled', 'discarded')
	RETURNING ` + jobColsJ + `
), notified AS (
	SELECT pg_notify({channel}, '{"k":"c","id":"' || l.id::text || '"}')
	FROM locked l
	WHERE l.state = 'active' AND EXISTS (SELECT 1 FROM updated)
)
SELECT l.state, updated.* FROM locked l LEFT JOIN updated ON true
WHERE (SELECT count(*) FROM notified) >= 0`

	// sqlRetryJob makes discarded or cancelled job $1 available again with its attempts reset.
	sqlRetryJob = `WITH locked AS (
	SELECT id, state FROM {schema}.jobs WHERE id = $1 FOR UPDATE
), updated AS (
	UPDATE {schema}.jobs j
	SET state = 'available', attempt = 0, scheduled_at = now(), completed_at = NULL,
		lease_expires_at = NULL, worker_id = NULL
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
	sqlActivateJob = `WITH locked AS (
	SELECT id, state FROM {schema}.jobs WHERE id = $1 FOR UPDATE
), updated AS (
	UPDATE {schema}.jobs j
	SET state = 'available', scheduled_at = now()
	FROM locked l
	WHERE j.id = $1 AND j.id = l.id AND l.state = 'pending'
	RETURNING ` + jobColsJ + `
), changed AS (
	SELECT queue, state, scheduled_at FROM updated
), notified AS (` + notifyClaimable + `
)
SELECT l.state, updated.* FROM locked l LEFT JOIN updated ON true
WHERE (SELECT count(*) FROM notified) >= 0`

	// sqlDeleteJob deletes job $1 unless it is active, returning it as it was.
	sqlDeleteJob = `WITH locked AS (
	SELECT id, state FROM {schema}.jobs WHERE id = $1 FOR UPDATE
), deleted AS (
	DELETE FROM {schema}.jobs j
	USING locked l
	WHERE j.id = $1 AND j.id = l.id AND l.state <> 'active'
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
		count(*) FILTER (WHERE state = 'scheduled') AS scheduled,
		count(*) FILTER (WHERE state = 'available') AS available,
		count(*) FILTER (WHERE state = 'pending') AS pending,
		count(*) FILTER (WHERE state = 'active') AS active,
		count(*) FILTER (WHERE state = 'completed') AS completed,
		count(*) FILTER (WHERE state = 'retryable') AS retryable,
		count(*) FILTER (WHERE state = 'cancelled') AS cancelled,
		count(*) FILTER (WHERE state = 'discarded') AS discarded
	FROM {schema}.jobs
	GROUP BY queue
) c
FULL JOIN {schema}.queues q ON q.name = c.queue
WHERE c.queue IS NOT NULL OR q.paused
ORDER BY 1`

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
	insertJob, notify, now, claimPlan, claim, claimKinds, finish, heartbeat, rescue, promote string
	discardExpired, nextDue, cleanup, getJob, listJobs, listJobsDesc, cancelJob, retryJob    string
	activateJob, deleteJob, listQueues, setPaused, elect, resign                             string

	cronCreate, cronGet, cronList, cronDelete, cronDue, cronAdvance string

	migrateLock, createSchema, searchPath, createMigrations, migrationsExist string
	appliedMigrations, recordMigration, forgetMigration                      string
}

// newQueries substitutes the quoted schema and the channel literal into every statement.
func newQueries(quotedSchema, channelLiteral string) *queries {
	r := strings.NewReplacer("{schema}", quotedSchema, "{channel}", channelLiteral)
	return &queries{
		insertJob:      r.Replace(sqlInsertJob),
		notify:         r.Replace(sqlNotify),
		now:            sqlNow,
		claimPlan:      sqlClaimPlan,
		claim:          r.Replace(sqlClaim),
		claimKinds:     r.Replace(sqlClaimKinds),
		finish:         r.Replace(sqlFinish),
		heartbeat:      r.Replace(sqlHeartbeat),
		rescue:         r.Replace(sqlRescue),
		promote:        r.Replace(sqlPromote),
		discardExpired: r.Replace(sqlDiscardExpired),
		nextDue:        r.Replace(sqlNextDue),
		cleanup:        r.Replace(sqlCleanup),
		getJob:         r.Replace(sqlGetJob),
		listJobs:       r.Replace(sqlListJobs),
		listJobsDesc:   r.Replace(sqlListJobsDesc),
		cancelJob:      r.Replace(sqlCancelJob),
		retryJob:       r.Replace(sqlRetryJob),
		activateJob:    r.Replace(sqlActivateJob),
		deleteJob:      r.Replace(sqlDeleteJob),
		listQueues:     r.Replace(sqlListQueues),
		setPaused:      r.Replace(sqlSetPaused),
		elect:          r.Replace(sqlElect),
		resign:         r.Replace(sqlResign),

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
