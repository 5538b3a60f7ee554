package sqlite

import (
	"fmt"
	"strings"

	"github.com/pronto-jobs/pronto/store"
)

// Every statement the store runs, in one place. Placeholders are numbered (?NNN) where one value is
// used twice. Times are unix microseconds from the store's clock, never SQLite's.

const insertJobSQL = `INSERT INTO pronto_jobs (id, kind, queue, args, meta, priority, state, attempt, max_attempts,
	tags, retry_policy, timeout_ms, created_at, scheduled_at, expires_at, unique_key, tenant, rate_key, workflow_id,
	parent_ids) VALUES (?, ?, ?, ?, ?, ?, ?, 0, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`

// insertJobArgs is the number of values insertJobSQL binds.
const insertJobArgs = 19

// insertExtraColumns are the columns the full form of the insert writes after insertJobSQL's: those of
// unique and workflow jobs. Plain jobs leave them NULL and take the shorter statement.
const insertExtraColumns = `, unique_states, unique_until, run_on`

// insertExtraArgs is the number of values insertExtraColumns binds.
const insertExtraArgs = 3

// insertJobsSQL returns a multi-row form of insertJobSQL for n rows; full adds insertExtraColumns.
func insertJobsSQL(n int, full bool) string {
	var b strings.Builder
	head, _, _ := strings.Cut(insertJobSQL, ") VALUES")
	b.WriteString(head)
	row := "(?, ?, ?, ?, ?, ?, ?, 0, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
	if full {
		b.WriteString(insertExtraColumns)
		row = "(?, ?, ?, ?, ?, ?, ?, 0, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
	}
	b.WriteString(") VALUES ")
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(row)
	}
	return b.String()
}

// uniqueKeyAfter returns the SET item that carries a job's unique key through a transition to the
// state given by the SQL expression to (evaluated on the row before the update), now being the SQL
// expression of the statement's time in unix microseconds.
//
// A job holds its key only in its unique states, so a transition can move it into them from outside
// while another job holds the key: a scheduled job promoted to available when only available holds
// the key, two jobs with the key completing together when only completed does. The unique index would
// then fail the whole statement, and every other job of the batch with it, on every retry. Instead the
// entering job gives its key up (it becomes NULL, as a lapsed holder's does) when another job holds it
// or, for statements that compute every row before writing any (UPDATE ... FROM), when rival (an SQL
// condition on the other rows of the statement, or "") finds one entering with it too. Statements
// that write row by row see the rows they wrote, so the first to enter keeps the key. Jobs without a
// key pay one NULL test; with the default unique states (every state that is not terminal) no
// automatic transition enters them.
//
// A holder whose period ran out holds nothing, so the entering job keeps its key; but that holder
// still sits in the index, and one statement cannot clear another row's key, so the statement fails
// with a unique violation: its caller clears the keys of lapsed holders and runs it again
// (retryLapsed).
func uniqueKeyAfter(to, rival, now string) string {
	if rival != "" {
		rival = " OR " + rival
	}
	return `unique_key = CASE
		WHEN pronto_jobs.unique_key IS NOT NULL
			AND instr(pronto_jobs.unique_states, ',' || ` + to + ` || ',') > 0
			AND instr(pronto_jobs.unique_states, ',' || pronto_jobs.state || ',') = 0
			AND (EXISTS (SELECT 1 FROM pronto_jobs AS o
				WHERE o.unique_key = pronto_jobs.unique_key AND instr(o.unique_states, ',' || o.state || ',') > 0
				  AND (o.unique_until IS NULL OR o.unique_until > ` + now + `))` +
		rival + `)
		THEN NULL ELSE pronto_jobs.unique_key END`
}

// claimableStatesSQL is the claimable states as pronto_jobs_claim's condition spells them (migration
// 014): a statement that is to use that index repeats it word for word. Chains of = instead of IN
// because SQLite evaluates an IN list of three or more constants in an index's condition by filling
// a temporary B-tree, for every row a claim or a finish writes.
const claimableStatesSQL = `(state = 'available' OR state = 'scheduled' OR state = 'retryable')`

// claimableSQL is the condition, on pronto_jobs, of the jobs a claim may take from queue ?4 at ?1.
//
// The due-time test is scheduled_at <= ?1 for every state: an available job's scheduled_at is never
// later than when it became available (every transition to available writes that moment), so the
// test adds nothing for it. Written so, it reads a column of pronto_jobs_claim, which SQLite tests on
// the index entry before it reads the row: the jobs scheduled or retrying later, which the index
// orders after the due ones of their priority, are passed over without reading their rows, where
// (state = 'available' OR scheduled_at <= ?1) read the row of each (see the PostgreSQL store's
// sqlClaim, and BenchmarkClaimBesideAScheduledBacklog).
const claimableSQL = `queue = ?4
		  AND ` + claimableStatesSQL + `
		  AND scheduled_at <= ?1
		  AND (expires_at IS NULL OR expires_at > ?1)
		  AND held IS NULL
		  AND NOT EXISTS (SELECT 1 FROM pronto_queues WHERE name = ?4 AND paused = 1)`

// kindsFilter returns "AND kind IN (?first, ...)" for n kinds, or "" for none.
func kindsFilter(n, first int) string {
	if n == 0 {
		return ""
	}
	ph := make([]string, n)
	for i := range ph {
		ph[i] = fmt.Sprintf("?%d", first+i)
	}
	return "AND kind IN (" + strings.Join(ph, ", ") + ")"
}

// newClaimToken is the claim token a claim writes on each job it makes active: 128 random bits,
// drawn per row, so that no two claims of a job ever share one (see store.Job.ClaimToken).
const newClaimToken = `lower(hex(randomblob(16)))`

// claimSQL returns the claim statement for a kinds filter of nKinds kinds (0: any kind).
// ?1 now, ?2 lease expiry, ?3 worker id, ?4 queue, ?5 limit, ?6... kinds.
//
// It claims nothing while the queue holds a claimable job with a rate key: Claim then takes the
// limited path (claimLimited), which enforces the key's limit if one is stored. That guard is one
// uncorrelated seek of pronto_jobs_rate_queue, evaluated once per statement like the paused flag,
// whatever the number of stored limits; queues without jobs with rate keys are claimed by the same
// plan as before rate limits existed. Likewise while it holds a claimable job with a tenant: Claim
// then claims in turns across tenants (claimFair), and a queue without tenants pays one more seek of
// an empty index. That guard is in the LIMIT, evaluated once before the scan: as a WHERE term it
// would be checked row by row, and a queue of tenant jobs would be read to its end for nothing.
//
// It walks the queue's priorities, highest first (prios: the next lower priority with a claimable
// job, one seek of pronto_jobs_claim each), and takes each one's due jobs from the front of its
// range in due-time order, so each range scan stops at the first job not yet due; the nested loop
// yields them in claim order and the LIMIT stops it. One scan ordered by (priority, due time) could
// not stop there: without statistics (the store runs no ANALYZE) SQLite read the index entry of
// every job due later whenever a claim found fewer jobs than its limit, in the writer's transaction
// (100,000 retries waiting: 11-12 ms a claim).
func claimSQL(nKinds int) string {
	return `WITH RECURSIVE prios(p) AS (
		SELECT (SELECT max(priority) FROM pronto_jobs INDEXED BY pronto_jobs_claim
			WHERE queue = ?4 AND ` + claimableStatesSQL + ` AND held IS NULL)
		UNION ALL
		SELECT (SELECT max(priority) FROM pronto_jobs INDEXED BY pronto_jobs_claim
			WHERE queue = ?4 AND ` + claimableStatesSQL + ` AND held IS NULL AND priority < prios.p)
		FROM prios WHERE prios.p IS NOT NULL)
	UPDATE pronto_jobs SET state = 'active', attempt = attempt + 1, started_at = ?1,
		lease_expires_at = ?2, worker_id = ?3, claim_token = ` + newClaimToken + `,
		` + uniqueKeyAfter(`'active'`, "", "?1") + `
	WHERE rowid IN (
		SELECT pronto_jobs.rowid FROM prios CROSS JOIN pronto_jobs
		WHERE prios.p IS NOT NULL AND priority = prios.p AND ` + claimableSQL + `
		  ` + kindsFilter(nKinds, 6) + `
		  AND NOT ` + keyedInQueueSQL("?4") + `
		LIMIT (CASE WHEN ` + tenantInQueueSQL("?4") + ` THEN 0 ELSE ?5 END))
	RETURNING ` + claimedColumns
}

// claimQueries holds claimSQL's text for the kinds filters clients commonly use, built once.
var claimQueries = func() (qs [17]string) {
	for n := range qs {
		qs[n] = claimSQL(n)
	}
	return qs
}()

// claimQuery returns claimSQL(nKinds), built once for up to 16 kinds.
// reassignWorkersSQL sets the worker id of claimed jobs: ? is a JSON array of [id, worker id, claim
// token] triples, and a job no longer active under its token is left alone.
const reassignWorkersSQL = `UPDATE pronto_jobs SET worker_id = json_extract(x.value, '$[1]')
	FROM json_each(?) AS x
	WHERE pronto_jobs.id = json_extract(x.value, '$[0]') AND pronto_jobs.state = 'active'
		AND pronto_jobs.claim_token = json_extract(x.value, '$[2]')`

func claimQuery(nKinds int) string {
	if nKinds < len(claimQueries) {
		return claimQueries[nKinds]
	}
	return claimSQL(nKinds)
}

// finishBatchSQL applies n completions in one statement: each row of c is (id, attempt, state,
// scheduled_at or NULL to keep, completed_at, result, error entry JSON or NULL, refund 0 or 1, claim
// token or NULL for the attempt alone to fence). Rows with a
// NULL id are padding. It returns the id, queue, rate key, workflow id and new state of every job it
// changed. With plainOnly it leaves workflow jobs alone: their completions must decide their children
// in the same transaction, which the single-statement fast path of Finish does not open.
func finishBatchSQL(n int, plainOnly bool) string {
	var b strings.Builder
	b.WriteString(`WITH c(id, attempt, state, sched, completed, result, err, refund, token) AS (VALUES `)
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("(?, ?, ?, ?, ?, ?, ?, ?, ?)")
	}
	b.WriteString(`)
	UPDATE pronto_jobs SET
		state = c.state,
		scheduled_at = COALESCE(c.sched, pronto_jobs.scheduled_at),
		completed_at = c.completed,
		result = CASE WHEN c.state = 'completed' THEN c.result ELSE pronto_jobs.result END,
		errors = CASE WHEN c.err IS NULL THEN pronto_jobs.errors
			ELSE json_insert(COALESCE(pronto_jobs.errors, '[]'), '$[#]',
				json_set(c.err, '$.started_at', ` + jsonMicroTime("pronto_jobs.started_at") + `)) END,
		max_attempts = min(pronto_jobs.max_attempts + c.refund, 2147483647),
		lease_expires_at = NULL,
		worker_id = NULL,
		` + finishUniqueKey + `
	FROM c
	WHERE pronto_jobs.id = c.id AND pronto_jobs.attempt = c.attempt AND pronto_jobs.state = 'active'
		AND (c.token IS NULL OR pronto_jobs.claim_token = c.token)`)
	if plainOnly {
		b.WriteString(` AND pronto_jobs.workflow_id IS NULL`)
	}
	b.WriteString(`
	RETURNING id, queue, ` + limitFreed + `, workflow_id, state`)
	return b.String()
}

// limitFreed is, for a job of pronto_jobs leaving active, the key of the limit it frees room under:
// its rate key, else its tenant's limit key (store.TenantLimitKey) when that tenant has a limit
// stored; NULL for none. The statements leaving active return it, and the queue of such a job is
// announced: a claim waiting for the room need not wait for its poll (a tenant at its limit ran
// MaxActive jobs per poll).
const limitFreed = `COALESCE(pronto_jobs.rate_key, CASE WHEN pronto_jobs.tenant IS NOT NULL AND EXISTS (
		SELECT 1 FROM pronto_rate_limits AS tl WHERE tl.key = 'tenant:' || pronto_jobs.tenant)
		THEN 'tenant:' || pronto_jobs.tenant END)`

// finishUniqueKey carries unique keys through finishBatchSQL: its rows are computed before any is
// written, so a job entering its unique states gives its key up to a job of the batch with a smaller
// id entering them with the same key. Its one positional parameter, after the rows', is the
// statement's time (finishChunkArgs).
var finishUniqueKey = uniqueKeyAfter("c.state", `EXISTS (SELECT 1 FROM c AS r JOIN pronto_jobs AS o ON o.id = r.id
				WHERE o.unique_key = pronto_jobs.unique_key AND o.id < pronto_jobs.id
				  AND o.state = 'active' AND o.attempt = r.attempt
				  AND instr(o.unique_states, ',' || r.state || ',') > 0
				  AND instr(o.unique_states, ',' || o.state || ',') = 0)`, "?")

// removeFinishedSQL deletes the jobs of completions that remove them (store.Completion.Remove),
// given as a JSON array of {"i": id, "a": attempt, "t": claim token or null}: each only while
// still active in that attempt (and under that claim), outside any workflow, and holding no
// unique key in the completed state; it returns their ids, queues and rate keys.
const removeFinishedSQL = `DELETE FROM pronto_jobs WHERE rowid IN (
	SELECT j.rowid FROM json_each(?) AS e JOIN pronto_jobs AS j ON j.id = json_extract(e.value, '$.i')
	WHERE j.state = 'active' AND j.attempt = json_extract(e.value, '$.a')
		AND (json_extract(e.value, '$.t') IS NULL OR j.claim_token = json_extract(e.value, '$.t'))
		AND j.workflow_id IS NULL
		AND (j.unique_key IS NULL OR instr(coalesce(j.unique_states, ''), ',completed,') = 0))
RETURNING id, queue, ` + limitFreed

// finishBatchArgs is the number of values one row of finishBatchSQL binds.
const finishBatchArgs = 9

// heartbeatSQL extends the leases of up to n jobs held by one worker and returns the ids it
// extended. ?1 lease expiry, ?2 worker id, then a pair per job: its id (NULL for padding) and its
// claim token (NULL: the worker id alone fences).
func heartbeatSQL(n int) string {
	pairs := make([]string, n)
	for i := range pairs {
		pairs[i] = fmt.Sprintf("(?%d, ?%d)", 3+2*i, 4+2*i)
	}
	return `WITH h(id, token) AS (VALUES ` + strings.Join(pairs, ", ") + `)
	UPDATE pronto_jobs SET lease_expires_at = ?1
	FROM h
	WHERE pronto_jobs.id = h.id AND pronto_jobs.state = 'active' AND pronto_jobs.worker_id = ?2
		AND (h.token IS NULL OR pronto_jobs.claim_token = h.token)
	RETURNING pronto_jobs.id`
}

// rescueSQL: ?1 now, ?2 now as JSON time text, ?3 limit.
var rescueSQL = `UPDATE pronto_jobs SET
		state = CASE WHEN attempt >= max_attempts THEN 'discarded' ELSE 'available' END,
		scheduled_at = CASE WHEN attempt >= max_attempts THEN scheduled_at ELSE ?1 END,
		completed_at = CASE WHEN attempt >= max_attempts THEN ?1 ELSE NULL END,
		errors = json_insert(COALESCE(errors, '[]'), '$[#]', json_object(
			'attempt', attempt, 'at', ?2, 'started_at', ` + jsonMicroTime("started_at") + `, 'type', 'lease_expired',
			'message', 'lease expired: worker ' || COALESCE(worker_id, '(unknown)') || ' stopped heartbeating')),
		lease_expires_at = NULL,
		worker_id = NULL,
		` + uniqueKeyAfter(`CASE WHEN pronto_jobs.attempt >= pronto_jobs.max_attempts THEN 'discarded' ELSE 'available' END`, "", "?1") + `
	WHERE id IN (
		SELECT id FROM pronto_jobs WHERE state = 'active' AND lease_expires_at <= ?1
		ORDER BY lease_expires_at LIMIT ?3)
	RETURNING ` + jobColumns

// promoteSQL: ?1 now, ?2 limit. It promotes the earliest due first, and finds them in each queue
// that has waiting jobs (queues: the next queue after the last, one probe of pronto_jobs_due each)
// from the front of the queue's range of the index: pronto_jobs_due leads with the queue, and a
// search of every queue at once for what is due passed over the entries of every job due later,
// in the writer's transaction, every PromoteInterval.
var promoteSQL = `WITH RECURSIVE queues(queue) AS (
		SELECT (SELECT queue FROM pronto_jobs WHERE state IN ('scheduled', 'retryable') ORDER BY queue LIMIT 1)
		UNION ALL
		SELECT (SELECT j.queue FROM pronto_jobs j
			WHERE j.state IN ('scheduled', 'retryable') AND j.queue > queues.queue ORDER BY j.queue LIMIT 1)
		FROM queues WHERE queues.queue IS NOT NULL)
	UPDATE pronto_jobs SET state = 'available', ` + uniqueKeyAfter(`'available'`, "", "?1") + `
	WHERE id IN (
		SELECT d.id FROM queues CROSS JOIN pronto_jobs d
		WHERE queues.queue IS NOT NULL AND d.id IN (
			SELECT j.id FROM pronto_jobs j INDEXED BY pronto_jobs_due
			WHERE j.queue = queues.queue AND j.state IN ('scheduled', 'retryable') AND j.scheduled_at <= ?1
			ORDER BY j.scheduled_at LIMIT ?2)
		ORDER BY d.scheduled_at LIMIT ?2)
	RETURNING queue`

// discardExpiredSQL: ?1 now, ?2 now as JSON time text, ?3 limit.
var discardExpiredSQL = `UPDATE pronto_jobs SET
		state = 'discarded',
		completed_at = ?1,
		errors = json_insert(COALESCE(errors, '[]'), '$[#]', json_object(
			'attempt', attempt, 'at', ?2, 'type', 'expired', 'message', 'job expired before it started')),
		lease_expires_at = NULL,
		worker_id = NULL,
		` + uniqueKeyAfter(`'discarded'`, "", "?1") + `
	WHERE id IN (
		SELECT id FROM pronto_jobs
		WHERE expires_at IS NOT NULL AND state IN ('available', 'scheduled', 'retryable', 'pending')
		  AND expires_at <= ?1
		LIMIT ?3)
	RETURNING ` + jobColumns

// nextDueSQL: ?1 queue, ?2 now. The earliest due time of the queue's scheduled and retryable jobs, and
// the end of every open rate window that is full while jobs of its key wait in the queue (the keys
// come from the queue's jobs, so queues without limited jobs pay one seek, whatever the number of
// stored limits), and of every tenant's (store.TenantLimitKey) while jobs of the tenant without a
// rate key wait in it (the tenants' limits are read in key order, a seek each for those with a full
// window).
const nextDueSQL = queueRateKeysCTE + `
	SELECT min(t) FROM (
		SELECT min(scheduled_at) AS t FROM pronto_jobs
		WHERE queue = ?1 AND state IN ('scheduled', 'retryable')
		UNION ALL
		SELECT min(l.window_start + l.period_us) FROM k JOIN pronto_rate_limits AS l ON l.key = k.key
		WHERE l.rate > 0 AND l.period_us > 0 AND l.window_count >= l.rate AND l.window_start + l.period_us > ?2
		  AND (EXISTS (SELECT 1 FROM pronto_jobs AS j
				WHERE j.rate_key = l.key AND j.state = 'available' AND j.queue = ?1)
			OR EXISTS (SELECT 1 FROM pronto_jobs AS j
				WHERE j.rate_key = l.key AND j.state IN ('scheduled', 'retryable') AND j.queue = ?1
				  AND j.scheduled_at <= ?2))
		UNION ALL
		SELECT min(l.window_start + l.period_us) FROM pronto_rate_limits AS l
		WHERE l.key >= 'tenant:' AND l.key < 'tenant;'
		  AND l.rate > 0 AND l.period_us > 0 AND l.window_count >= l.rate AND l.window_start + l.period_us > ?2
		  AND EXISTS (SELECT 1 FROM pronto_jobs AS j
				WHERE j.queue = ?1 AND j.tenant = substr(l.key, 8) AND j.rate_key IS NULL
				  AND j.state IN ('available', 'scheduled', 'retryable') AND j.scheduled_at <= ?2))`

// cleanupScanSQL pages through jobs in rowid (insertion) order. ?1 rowid cursor, ?2 page size. Its last
// column is 1 for a workflow job that a pending child still waits for (see keptParentSQL).
const cleanupScanSQL = `SELECT rowid, state, completed_at, created_at, queue,
		CASE WHEN workflow_id IS NULL THEN 0 ELSE ` + keptParentSQL + ` END
	FROM pronto_jobs
	WHERE rowid > ?1 ORDER BY rowid LIMIT ?2`

// keptParentSQL is true for a job of pronto_jobs that a pending workflow child still waits for.
// Cleanup keeps such a job, whatever its age: the child needs its state to be released and its
// result for ParentResults.
const keptParentSQL = `EXISTS (SELECT 1 FROM pronto_job_deps AS d JOIN pronto_jobs AS c ON c.id = d.child_id
		WHERE d.parent_id = pronto_jobs.id AND c.state = 'pending')`

// cleanupDeleteSQL deletes the candidates (a JSON array of rowids) that are still terminal and old
// enough, and not kept as parents. ?1 rowids, ?2 completed before, ?3 cancelled before, ?4 discarded
// before (NULL: keep).
const cleanupDeleteSQL = `DELETE FROM pronto_jobs
	WHERE rowid IN (SELECT value FROM json_each(?1))
	  AND ((state = 'completed' AND completed_at < ?2)
	    OR (state = 'cancelled' AND completed_at < ?3)
	    OR (state = 'discarded' AND completed_at < ?4))
	  AND (workflow_id IS NULL OR NOT ` + keptParentSQL + `)
	RETURNING workflow_id`

// cleanupWorkflowsSQL deletes the workflows named in the JSON array ?1 that have no jobs left.
const cleanupWorkflowsSQL = `DELETE FROM pronto_workflows
	WHERE id IN (SELECT value FROM json_each(?1))
	  AND NOT EXISTS (SELECT 1 FROM pronto_jobs WHERE workflow_id = pronto_workflows.id)`

const getJobSQL = `SELECT ` + jobColumns + ` FROM pronto_jobs WHERE id = ?1`

// listJobsSQL returns the listing statement, in ascending or descending id order, and with a
// workflow filter or not. ?1 states, ?2 queues, ?3 kinds (JSON arrays or NULL), ?4 cursor, ?5 limit,
// ?6 workflow id (only with the filter, which lets the workflow index find the jobs).
func listJobsSQL(descending, byWorkflow bool) string {
	cmp, end, order := ">", "<", "id"
	if descending {
		cmp, end, order = "<", ">", "id DESC"
	}
	workflow := ""
	if byWorkflow {
		workflow = "AND workflow_id = ?10"
	}
	return `SELECT ` + jobColumns + ` FROM pronto_jobs
	WHERE id ` + cmp + ` ?4 AND id ` + end + ` ?7
	  AND (?8 IS NULL OR completed_at >= ?8) AND (?9 IS NULL OR completed_at < ?9)
	  AND (?1 IS NULL OR state IN (SELECT value FROM json_each(?1)))
	  AND (?2 IS NULL OR queue IN (SELECT value FROM json_each(?2)))
	  AND (?3 IS NULL OR kind IN (SELECT value FROM json_each(?3)))
	  AND (?6 IS NULL OR NOT EXISTS (SELECT 1 FROM json_each(?6) want
	        WHERE want.value NOT IN (SELECT value FROM json_each(coalesce(tags, '[]')))))
	  ` + workflow + `
	ORDER BY ` + order + ` LIMIT ?5`
}

// listTenantJobsSQL is listJobsSQL restricted to the jobs of tenant ?11 (and of workflow ?10 when
// byWorkflow) in states: one range read of pronto_jobs_tenant_state (tenant, state, id) per state,
// each stopping at the page size ?5, merged in id order. States are pronto's fixed names, quoted here.
func listTenantJobsSQL(descending, byWorkflow bool, states []string) string {
	cmp, end, order := ">", "<", "id"
	if descending {
		cmp, end, order = "<", ">", "id DESC"
	}
	workflow := ""
	if byWorkflow {
		workflow = "AND workflow_id = ?10"
	}
	var b strings.Builder
	b.WriteString(`SELECT ` + jobColumns + ` FROM (`)
	for i, st := range states {
		if i > 0 {
			b.WriteString(" UNION ALL ")
		}
		b.WriteString(`SELECT * FROM (SELECT ` + jobColumns + ` FROM pronto_jobs INDEXED BY pronto_jobs_tenant_state
	WHERE tenant = ?11 AND state = '` + st + `' AND id ` + cmp + ` ?4 AND id ` + end + ` ?7
	  AND (?8 IS NULL OR completed_at >= ?8) AND (?9 IS NULL OR completed_at < ?9)
	  AND (?2 IS NULL OR queue IN (SELECT value FROM json_each(?2)))
	  AND (?3 IS NULL OR kind IN (SELECT value FROM json_each(?3)))
	  AND (?6 IS NULL OR NOT EXISTS (SELECT 1 FROM json_each(?6) want
	        WHERE want.value NOT IN (SELECT value FROM json_each(coalesce(tags, '[]')))))
	  ` + workflow + `
	ORDER BY ` + order + ` LIMIT ?5)`)
	}
	b.WriteString(`) ORDER BY ` + order + ` LIMIT ?5`)
	return b.String()
}

// cancelledClaimError is the SQL of the errors column of a job being cancelled, now the parameter
// holding the time in microseconds: an active job's claim ends with a "cancelled" entry (its run may
// still report; see store.ErrorTypeCancelled).
func cancelledClaimError(now string) string {
	return `errors = CASE WHEN state = 'active' THEN json_insert(COALESCE(errors, '[]'), '$[#]', json_object(
			'attempt', attempt, 'at', ` + jsonMicroTime(now) + `, 'started_at', ` + jsonMicroTime("started_at") + `,
			'type', '` + store.ErrorTypeCancelled + `',
			'message', 'cancelled while running on worker ' || COALESCE(worker_id, '(unknown)'))) ELSE errors END`
}

// cancelJobSQL: ?1 now, ?2 id.
var cancelJobSQL = `UPDATE pronto_jobs SET state = 'cancelled', completed_at = ?1, lease_expires_at = NULL,
		` + cancelledClaimError("?1") + `,
		worker_id = NULL, ` + uniqueKeyAfter(`'cancelled'`, "", "?1") + `
	WHERE id = ?2 AND state NOT IN ('completed', 'cancelled', 'discarded')
	RETURNING ` + jobColumns

// runTokenSQL reads the claim token of job ?1's latest run.
const runTokenSQL = `SELECT coalesce(claim_token, '') FROM pronto_jobs WHERE id = ?1`

// retryJobSQL: ?1 now, ?2 id.
const retryJobSQL = `UPDATE pronto_jobs SET state = 'available', attempt = 0, scheduled_at = ?1,
		completed_at = NULL, lease_expires_at = NULL, worker_id = NULL, held = NULL
	WHERE id = ?2 AND state IN ('discarded', 'cancelled')
	RETURNING ` + jobColumns

// rependJobSQL puts job ?1, just retried, back to pending (see RetryJob).
const rependJobSQL = `UPDATE pronto_jobs SET state = 'pending' WHERE id = ?1`

// setParentResultsSQL: ?1 id, ?2 the results as JSON text.
const setParentResultsSQL = `UPDATE pronto_jobs SET parent_results = ?2 WHERE id = ?1`

// activateJobSQL: ?1 now, ?2 id.
const activateJobSQL = `UPDATE pronto_jobs SET state = 'available', scheduled_at = ?1
	WHERE id = ?2 AND state = 'pending'
	RETURNING ` + jobColumns

// deleteJobSQL: ?1 id.
// deleteJobSQL deletes job ?1 unless it is active or a pending workflow child waits for it.
const deleteJobSQL = `DELETE FROM pronto_jobs WHERE id = ?1 AND state <> 'active'
	AND (workflow_id IS NULL OR NOT ` + keptParentSQL + `) RETURNING ` + jobColumns

const jobStateSQL = `SELECT state FROM pronto_jobs WHERE id = ?1`

// jobPrioritySQL reads a job's state and priority: ?1 id.
const jobPrioritySQL = `SELECT state, priority FROM pronto_jobs WHERE id = ?1`

// setJobPrioritySQL sets the priority of a job waiting to run: ?1 priority, ?2 id.
const setJobPrioritySQL = `UPDATE pronto_jobs SET priority = ?1
	WHERE id = ?2 AND state IN ('available', 'scheduled', 'pending')
	RETURNING ` + jobColumns

const queueCountsSQL = `SELECT queue, state, count(*) FROM pronto_jobs GROUP BY queue, state`

const queueFlagsSQL = `SELECT name, paused FROM pronto_queues`

// pauseQueueSQL: ?1 name, ?2 now.
const pauseQueueSQL = `INSERT INTO pronto_queues (name, paused, updated_at) VALUES (?1, 1, ?2)
	ON CONFLICT (name) DO UPDATE SET paused = 1, updated_at = excluded.updated_at`

// resumeQueueSQL: ?1 name, ?2 now.
const resumeQueueSQL = `UPDATE pronto_queues SET paused = 0, updated_at = ?2 WHERE name = ?1`

// electSQL returns a row if and only if ?2 leads ?1 afterwards. ?3 now, ?4 expiry.
const electSQL = `INSERT INTO pronto_leaders (name, leader_id, elected_at, expires_at) VALUES (?1, ?2, ?3, ?4)
	ON CONFLICT (name) DO UPDATE SET
		elected_at = CASE WHEN pronto_leaders.leader_id = excluded.leader_id
			THEN pronto_leaders.elected_at ELSE excluded.elected_at END,
		leader_id = excluded.leader_id,
		expires_at = excluded.expires_at
	WHERE pronto_leaders.leader_id = excluded.leader_id OR pronto_leaders.expires_at <= ?3
	RETURNING leader_id`

// resignSQL: ?1 name, ?2 leader id.
const resignSQL = `DELETE FROM pronto_leaders WHERE name = ?1 AND leader_id = ?2`

// Unique jobs.

// uniqueHolderSQL returns the job holding unique key ?1, if any. Its condition is the unique index's,
// so the index finds it.
const uniqueHolderSQL = `SELECT ` + jobColumns + ` FROM pronto_jobs
	WHERE unique_key = ?1 AND instr(unique_states, ',' || state || ',') > 0`

// heldUniqueKeysSQL returns the key and id of each job holding one of the keys of JSON array ?1 at
// ?2 (unix microseconds). Its condition is the unique index's, so the index finds them.
const heldUniqueKeysSQL = `SELECT unique_key, id FROM pronto_jobs
	WHERE unique_key IN (SELECT value FROM json_each(?1))
	  AND unique_key IS NOT NULL AND instr(unique_states, ',' || state || ',') > 0
	  AND (unique_until IS NULL OR unique_until > ?2)`

// releaseLapsedSQL clears the unique keys of the jobs holding them whose period ran out by ?1 (see
// retryLapsed). Its condition is the unique index's, so it reads the holders only.
const releaseLapsedSQL = `UPDATE pronto_jobs SET unique_key = NULL
	WHERE unique_key IS NOT NULL AND instr(unique_states, ',' || state || ',') > 0 AND unique_until <= ?1`

// releaseUniqueKeySQL clears the unique key of job ?1 (its period ran out, or a replacement took the
// key over while the job still held it).
const releaseUniqueKeySQL = `UPDATE pronto_jobs SET unique_key = NULL WHERE id = ?1`

// Rate limits.

// upsertRateLimitSQL creates or replaces limit ?1 and keeps its current window, so that a client
// setting the limit on every insert does not reset the count. ?2 max active, ?3 rate, ?4 period in
// microseconds, ?5 on-limit action, ?6 now.
const upsertRateLimitSQL = `INSERT INTO pronto_rate_limits (key, max_active, rate, period_us, on_limit, updated_at)
	VALUES (?1, ?2, ?3, ?4, ?5, ?6)
	ON CONFLICT (key) DO UPDATE SET max_active = excluded.max_active, rate = excluded.rate,
		period_us = excluded.period_us, on_limit = excluded.on_limit, updated_at = excluded.updated_at`

// rateLimitInfoSQL selects limits with their use: the key's active jobs, and its waiting jobs
// (available, or scheduled/retryable and due at ?1). A tenant's limit key (store.TenantLimitKey)
// counts the tenant's jobs, whatever their rate keys, since its limit bounds them all (through
// pronto_jobs_tenant_state); any other key, the jobs naming it.
const rateLimitInfoSQL = `SELECT l.key, l.max_active, l.rate, l.period_us, l.on_limit, l.window_start,
		l.window_count,
		CASE WHEN substr(l.key, 1, 7) = 'tenant:' THEN
			(SELECT count(*) FROM pronto_jobs AS j WHERE j.tenant = substr(l.key, 8) AND j.state = 'active')
		ELSE (SELECT count(*) FROM pronto_jobs AS j WHERE j.rate_key = l.key AND j.state = 'active') END,
		CASE WHEN substr(l.key, 1, 7) = 'tenant:' THEN
			(SELECT count(*) FROM pronto_jobs AS j WHERE j.tenant = substr(l.key, 8)
				AND j.state IN ('available', 'scheduled', 'retryable')
				AND j.scheduled_at <= ?1)
		ELSE (SELECT count(*) FROM pronto_jobs AS j WHERE j.rate_key = l.key
			AND j.state IN ('available', 'scheduled', 'retryable')
			AND j.scheduled_at <= ?1) END
	FROM pronto_rate_limits AS l`

// getRateLimitSQL: ?1 now, ?2 key.
const getRateLimitSQL = rateLimitInfoSQL + ` WHERE l.key = ?2`

// listRateLimitsSQL: ?1 now.
const listRateLimitsSQL = rateLimitInfoSQL + ` ORDER BY l.key`

// deleteRateLimitSQL: ?1 key.
const deleteRateLimitSQL = `DELETE FROM pronto_rate_limits WHERE key = ?1`

// rateKeyQueuesSQL lists the queues holding claimable jobs of key ?1 (the queues a changed limit may
// unblock).
const rateKeyQueuesSQL = `SELECT DISTINCT queue FROM pronto_jobs
	WHERE rate_key = ?1 AND state IN ('available', 'scheduled', 'retryable')`

// keyedInQueueSQL is true when the queue given by placeholder queue holds a claimable job with a rate
// key: one seek of pronto_jobs_rate_queue.
func keyedInQueueSQL(queue string) string {
	return `EXISTS (SELECT 1 FROM pronto_jobs AS j
		WHERE j.queue = ` + queue + ` AND j.rate_key IS NOT NULL AND j.state IN ('available', 'scheduled', 'retryable'))`
}

// queueModeSQL asks keyedInQueueSQL and tenantInQueueSQL of queue ?1 at once. Claim asks it, on a
// reader, only when its statement claimed nothing: rate-limited jobs take the limited claim, else
// tenant jobs the fair one.
var queueModeSQL = `SELECT ` + keyedInQueueSQL("?1") + `, ` + tenantInQueueSQL("?1")

// queueRateKeysCTE enumerates, as k(key), the distinct rate keys of queue ?1's claimable jobs, one
// seek of pronto_jobs_rate_queue per key (however many jobs each has).
const queueRateKeysCTE = `WITH RECURSIVE k(key) AS (
		SELECT (SELECT min(rate_key) FROM pronto_jobs
			WHERE queue = ?1 AND rate_key IS NOT NULL AND state IN ('available', 'scheduled', 'retryable'))
		UNION ALL
		SELECT (SELECT min(rate_key) FROM pronto_jobs
			WHERE queue = ?1 AND rate_key > k.key AND state IN ('available', 'scheduled', 'retryable'))
		FROM k WHERE k.key IS NOT NULL)`

// rateLimitStateSQL reads limit ?1 and its active count inside a claim's transaction: a tenant's limit
// key (store.TenantLimitKey) counts the tenant's active jobs, as rateLimitInfoSQL reports it, since
// that limit bounds them all; any other key, the jobs naming it.
const rateLimitStateSQL = `SELECT max_active, rate, period_us, on_limit, window_start, window_count,
		CASE WHEN substr(?1, 1, 7) = 'tenant:' THEN
			(SELECT count(*) FROM pronto_jobs WHERE tenant = substr(?1, 8) AND state = 'active')
		ELSE (SELECT count(*) FROM pronto_jobs WHERE rate_key = ?1 AND state = 'active') END
	FROM pronto_rate_limits WHERE key = ?1`

// claimCandidatesSQL returns one page of a limited claim's candidates in claim order, after the
// cursor (?5 priority, ?6 scheduled_at, ?7 id; ?5 NULL for the first page), leaving out the keys in the
// JSON array ?3 (exhausted keys whose jobs wait) and the tenants in the JSON array ?8 (tenants at
// their limit), at most ?2 rows. ?1 now, ?4 queue, ?9... kinds. It walks the queue's priorities from
// the cursor's down, as claimSQL does, so that a page short of ?2 rows stops at the first job of each
// priority not yet due instead of passing over every job due later (a rate key's 100,000 retries
// waiting: 12 ms a claim, in the writer's transaction).
func claimCandidatesSQL(nKinds int) string {
	return `WITH RECURSIVE prios(p) AS (
		SELECT (SELECT max(priority) FROM pronto_jobs INDEXED BY pronto_jobs_claim
			WHERE queue = ?4 AND ` + claimableStatesSQL + ` AND held IS NULL AND (?5 IS NULL OR priority <= ?5))
		UNION ALL
		SELECT (SELECT max(priority) FROM pronto_jobs INDEXED BY pronto_jobs_claim
			WHERE queue = ?4 AND ` + claimableStatesSQL + ` AND held IS NULL AND priority < prios.p)
		FROM prios WHERE prios.p IS NOT NULL)
	SELECT pronto_jobs.rowid, rate_key, tenant, priority, scheduled_at, id FROM prios CROSS JOIN pronto_jobs
	WHERE prios.p IS NOT NULL AND priority = prios.p AND ` + claimableSQL + `
	  ` + kindsFilter(nKinds, 9) + `
	  AND (?5 IS NULL OR priority < ?5 OR (priority = ?5 AND (scheduled_at > ?6 OR (scheduled_at = ?6 AND id > ?7))))
	  AND (rate_key IS NULL OR rate_key NOT IN (SELECT value FROM json_each(?3)))
	  AND (tenant IS NULL OR tenant NOT IN (SELECT value FROM json_each(?8)))
	LIMIT ?2`
}

// claimRowsSQL claims the jobs whose rowids are in the JSON array ?4. ?1 now, ?2 lease expiry, ?3 worker.
var claimRowsSQL = `UPDATE pronto_jobs SET state = 'active', attempt = attempt + 1, started_at = ?1,
		lease_expires_at = ?2, worker_id = ?3, held = NULL, claim_token = ` + newClaimToken + `,
		` + uniqueKeyAfter(`'active'`, "", "?1") + `
	WHERE rowid IN (SELECT value FROM json_each(?4))
	RETURNING ` + jobColumns

// Held jobs: see the held column in migration 003.

// holdKeySQL holds back up to ?4 of key ?1's claimable jobs due at ?3 in queue ?2, taking them out of
// the claim index.
const holdKeySQL = `UPDATE pronto_jobs SET held = 1
	WHERE rowid IN (SELECT rowid FROM pronto_jobs
		WHERE rate_key = ?1 AND state IN ('available', 'scheduled', 'retryable') AND queue = ?2
		  AND scheduled_at <= ?3 AND held IS NULL
		LIMIT ?4)`

// heldKeysSQL lists the keys of queue ?1's held jobs (one index seek per key), each with its limit, if
// one is stored (the sixth column is 1), and its active count (a tenant's limit key: the tenant's, as
// in rateLimitStateSQL).
const heldKeysSQL = `WITH RECURSIVE k(key) AS (
		SELECT (SELECT min(rate_key) FROM pronto_jobs INDEXED BY pronto_jobs_held
			WHERE queue = ?1 AND held IS NOT NULL AND state IN ('available', 'scheduled', 'retryable'))
		UNION ALL
		SELECT (SELECT min(rate_key) FROM pronto_jobs INDEXED BY pronto_jobs_held
			WHERE queue = ?1 AND held IS NOT NULL AND state IN ('available', 'scheduled', 'retryable')
			  AND rate_key > k.key)
		FROM k WHERE k.key IS NOT NULL)
	SELECT k.key, COALESCE(l.max_active, 0), COALESCE(l.rate, 0), COALESCE(l.period_us, 0),
		COALESCE(l.on_limit, ''), l.key IS NOT NULL, l.window_start, COALESCE(l.window_count, 0),
		CASE WHEN substr(k.key, 1, 7) = 'tenant:' THEN
			(SELECT count(*) FROM pronto_jobs AS a WHERE a.tenant = substr(k.key, 8) AND a.state = 'active')
		ELSE (SELECT count(*) FROM pronto_jobs AS a WHERE a.rate_key = k.key AND a.state = 'active') END
	FROM k LEFT JOIN pronto_rate_limits AS l ON l.key = k.key
	WHERE k.key IS NOT NULL`

// heldCandidatesSQL returns up to ?3 claimable held jobs of key ?2 in queue ?4, in claim order. ?1
// now, ?5... kinds.
func heldCandidatesSQL(nKinds int) string {
	return `SELECT rowid, rate_key, tenant, priority, scheduled_at, id FROM pronto_jobs
	WHERE queue = ?4 AND rate_key = ?2 AND held IS NOT NULL AND state IN ('available', 'scheduled', 'retryable')
	  AND scheduled_at <= ?1
	  AND (expires_at IS NULL OR expires_at > ?1)
	  ` + kindsFilter(nKinds, 5) + `
	  AND NOT EXISTS (SELECT 1 FROM pronto_queues WHERE name = ?4 AND paused = 1)
	ORDER BY priority DESC, scheduled_at, id
	LIMIT ?3`
}

// releaseHeldSQL returns key ?1's held jobs to the claim index (its limit changed: claims judge them
// afresh).
const releaseHeldSQL = `UPDATE pronto_jobs SET held = NULL WHERE rate_key = ?1 AND held IS NOT NULL`

// uniqueRivalSQL finds the job other than ?1 holding ?1's unique key (after a manual transition of ?1
// ran into the unique index), with its state and period.
const uniqueRivalSQL = `SELECT o.id, o.state, o.unique_key, o.unique_until FROM pronto_jobs AS j
	JOIN pronto_jobs AS o ON o.unique_key = j.unique_key AND instr(o.unique_states, ',' || o.state || ',') > 0
	WHERE j.id = ?1 AND o.id <> j.id`

// rateLimitValuesSQL reads limit ?1 as stored.
const rateLimitValuesSQL = `SELECT max_active, rate, period_us, on_limit FROM pronto_rate_limits WHERE key = ?1`

// setWindowSQL records limit ?1's current window: opened at ?2, ?3 jobs started in it.
const setWindowSQL = `UPDATE pronto_rate_limits SET window_start = ?2, window_count = ?3 WHERE key = ?1`

// rescheduleRowsSQL moves held-back jobs (JSON array ?2 of rowids) to scheduled at ?1; ?3 now. It
// returns them as they now are (store.ClaimParams.OnHeldBack).
var rescheduleRowsSQL = `UPDATE pronto_jobs SET state = 'scheduled', scheduled_at = ?1, held = NULL,
		` + uniqueKeyAfter(`'scheduled'`, "", "?3") + `
	WHERE rowid IN (SELECT value FROM json_each(?2))
	RETURNING ` + jobColumns

// dropRowsSQL discards held-back jobs (JSON array ?3 of rowids) with an error of type rate_limited,
// and returns them as they now are (store.ClaimParams.OnHeldBack). ?1 now, ?2 now as JSON time text.
var dropRowsSQL = `UPDATE pronto_jobs SET
		state = 'discarded',
		completed_at = ?1,
		errors = json_insert(COALESCE(errors, '[]'), '$[#]', json_object(
			'attempt', attempt, 'at', ?2, 'type', 'rate_limited',
			'message', 'rate limit ' || rate_key || ' exhausted: job dropped (on_limit drop)')),
		lease_expires_at = NULL,
		worker_id = NULL,
		held = NULL,
		` + uniqueKeyAfter(`'discarded'`, "", "?1") + `
	WHERE rowid IN (SELECT value FROM json_each(?3))
	RETURNING ` + jobColumns

// Workflows.

// insertWorkflowSQL: ?1 id, ?2 name, ?3 type, ?4 meta, ?5 now.
const insertWorkflowSQL = `INSERT INTO pronto_workflows (id, name, type, meta, created_at) VALUES (?1, ?2, ?3, ?4, ?5)`

// insertDepsSQL stores workflow edges: ?1 is a JSON array of [parent, child] pairs.
const insertDepsSQL = `INSERT INTO pronto_job_deps (parent_id, child_id)
	SELECT value ->> 0, value ->> 1 FROM json_each(?1)`

const getWorkflowSQL = `SELECT id, name, type, meta, created_at, cancelled_at FROM pronto_workflows WHERE id = ?1`

// workflowCountsSQL counts workflow ?1's jobs per state, its members and its callbacks apart (the
// second column is 1 for a callback), with the latest completion time.
const workflowCountsSQL = `SELECT state, run_on IS NOT NULL, count(*), max(completed_at) FROM pronto_jobs
	WHERE workflow_id = ?1 GROUP BY state, run_on IS NOT NULL`

// markWorkflowCancelledSQL: ?1 id, ?2 now. The first cancellation's time is kept.
const markWorkflowCancelledSQL = `UPDATE pronto_workflows SET cancelled_at = COALESCE(cancelled_at, ?2)
	WHERE id = ?1 RETURNING id`

// workflowUnfinishedSQL lists workflow ?1's jobs that are not terminal, in id order: the jobs a
// cancel of the workflow cancels, as they are before it.
const workflowUnfinishedSQL = `SELECT ` + jobColumns + ` FROM pronto_jobs
	WHERE workflow_id = ?1 AND state NOT IN ('completed', 'cancelled', 'discarded') ORDER BY id`

// cancelWorkflowJobsSQL cancels every job of workflow ?1 that is not terminal. ?2 now.
var cancelWorkflowJobsSQL = `UPDATE pronto_jobs SET state = 'cancelled', completed_at = ?2,
		` + cancelledClaimError("?2") + `,
		lease_expires_at = NULL, worker_id = NULL
	WHERE workflow_id = ?1 AND state NOT IN ('completed', 'cancelled', 'discarded')
	RETURNING id, queue, ` + limitFreed

// pendingChildrenSQL returns the pending children of the jobs in the JSON array ?1.
const pendingChildrenSQL = `SELECT DISTINCT j.id, j.queue, j.run_on, j.parent_ids
	FROM pronto_job_deps AS d JOIN pronto_jobs AS j ON j.id = d.child_id
	WHERE d.parent_id IN (SELECT value FROM json_each(?1)) AND j.state = 'pending'`

// parentStatesSQL returns the state and result of the jobs in the JSON array ?1.
const parentStatesSQL = `SELECT id, state, result FROM pronto_jobs WHERE id IN (SELECT value FROM json_each(?1))`

// releaseChildrenSQL makes pending children available with their parents' results: ?2 is a JSON
// array of {"id": ..., "results": [...]} objects. ?1 now.
const releaseChildrenSQL = `UPDATE pronto_jobs SET state = 'available', scheduled_at = ?1, parent_results = r.results
	FROM (SELECT value ->> '$.id' AS id, value -> '$.results' AS results FROM json_each(?2)) AS r
	WHERE pronto_jobs.id = r.id AND pronto_jobs.state = 'pending'`

// cancelChildrenSQL cancels the pending children in the JSON array ?2 and returns them. ?1 now.
const cancelChildrenSQL = `UPDATE pronto_jobs SET state = 'cancelled', completed_at = ?1
	WHERE id IN (SELECT value FROM json_each(?2)) AND state = 'pending'
	RETURNING id`

// jsonMicroTime is the SQL text of col, a time in microseconds since the epoch, as the RFC 3339 UTC
// text encoding/json reads into a time.Time ("2026-01-02T15:04:05.000123Z"); NULL stays NULL.
func jsonMicroTime(col string) string {
	return `(strftime('%Y-%m-%dT%H:%M:%S', ` + col + ` / 1000000, 'unixepoch') || printf('.%06dZ', ` + col + ` % 1000000))`
}

// Settings (workers.go): a JSON text per key. The swaps compare the stored text byte for byte with
// what GetSetting returned; each reports by its row count whether it changed the setting.
const (
	getSettingSQL    = `SELECT value FROM pronto_settings WHERE key = ?1`
	deleteSettingSQL = `DELETE FROM pronto_settings WHERE key = ?1`
	setSettingSQL    = `INSERT INTO pronto_settings (key, value, updated_at) VALUES (?1, ?2, ?3)
		ON CONFLICT (key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at`
	// ?1 key, ?2 value, ?3 now: stores the value where the key is absent.
	addSettingSQL = `INSERT INTO pronto_settings (key, value, updated_at) VALUES (?1, ?2, ?3) ON CONFLICT (key) DO NOTHING`
	// ?1 key, ?2 old value, ?3 new value, ?4 now.
	swapSettingSQL = `UPDATE pronto_settings SET value = ?3, updated_at = ?4 WHERE key = ?1 AND value = ?2`
	// ?1 key, ?2 old value.
	dropSettingSQL = `DELETE FROM pronto_settings WHERE key = ?1 AND value = ?2`
)

// availableByPrioritySQL counts queue ?1's available jobs per priority. Each half repeats the
// condition of the partial index it reads (pronto_jobs_claim, pronto_jobs_held), which SQLite needs
// to use it, so the count reads the queue's claimable jobs, not the table.
const availableByPrioritySQL = `SELECT priority, count(*) FROM (
	SELECT priority FROM pronto_jobs WHERE queue = ?1 AND state = 'available'
		AND (state = 'available' OR state = 'scheduled' OR state = 'retryable') AND held IS NULL
	UNION ALL
	SELECT priority FROM pronto_jobs WHERE queue = ?1 AND state = 'available'
		AND held IS NOT NULL AND state IN ('available', 'scheduled', 'retryable')
) GROUP BY priority`
