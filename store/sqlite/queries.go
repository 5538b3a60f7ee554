package sqlite

import (
	"fmt"
	"strings"
)

// Every statement the store runs, in one place. Placeholders are numbered (?NNN) where one value is
// used twice. Times are unix microseconds from the store's clock, never SQLite's.

const insertJobSQL = `INSERT INTO pronto_jobs (id, kind, queue, args, meta, priority, state, attempt, max_attempts,
	tags, retry_policy, timeout_ms, created_at, scheduled_at, expires_at, unique_key, tenant, rate_key, workflow_id,
	parent_ids) VALUES (?, ?, ?, ?, ?, ?, ?, 0, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`

// insertJobArgs is the number of values insertJobSQL binds.
const insertJobArgs = 19

// insertJobsSQL returns a multi-row form of insertJobSQL for n rows.
func insertJobsSQL(n int) string {
	var b strings.Builder
	head, _, _ := strings.Cut(insertJobSQL, "VALUES")
	b.WriteString(head)
	b.WriteString("VALUES ")
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("(?, ?, ?, ?, ?, ?, ?, 0, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
	}
	return b.String()
}

// claimSQL returns the claim statement for a kinds filter of nKinds kinds (0: any kind).
// ?1 now, ?2 lease expiry, ?3 worker id, ?4 queue, ?5 limit, ?6... kinds.
func claimSQL(nKinds int) string {
	kinds := ""
	if nKinds > 0 {
		ph := make([]string, nKinds)
		for i := range ph {
			ph[i] = fmt.Sprintf("?%d", 6+i)
		}
		kinds = "AND kind IN (" + strings.Join(ph, ", ") + ")"
	}
	return `UPDATE pronto_jobs SET state = 'active', attempt = attempt + 1, started_at = ?1,
		lease_expires_at = ?2, worker_id = ?3
	WHERE rowid IN (
		SELECT rowid FROM pronto_jobs
		WHERE queue = ?4
		  AND state IN ('available', 'scheduled', 'retryable')
		  AND (state = 'available' OR scheduled_at <= ?1)
		  AND (expires_at IS NULL OR expires_at > ?1)
		  ` + kinds + `
		  AND NOT EXISTS (SELECT 1 FROM pronto_queues WHERE name = ?4 AND paused = 1)
		ORDER BY priority DESC, scheduled_at, id
		LIMIT ?5)
	RETURNING ` + jobColumns
}

// finishBatchSQL applies n completions in one statement: each row of c is (id, attempt, state,
// scheduled_at or NULL to keep, completed_at, result, error entry JSON or NULL, refund 0 or 1). Rows with a
// NULL id are padding. It returns the id and queue of every job it changed.
func finishBatchSQL(n int) string {
	var b strings.Builder
	b.WriteString(`WITH c(id, attempt, state, sched, completed, result, err, refund) AS (VALUES `)
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("(?, ?, ?, ?, ?, ?, ?, ?)")
	}
	b.WriteString(`)
	UPDATE pronto_jobs SET
		state = c.state,
		scheduled_at = COALESCE(c.sched, pronto_jobs.scheduled_at),
		completed_at = c.completed,
		result = CASE WHEN c.state = 'completed' THEN c.result ELSE pronto_jobs.result END,
		errors = CASE WHEN c.err IS NULL THEN pronto_jobs.errors
			ELSE json_insert(COALESCE(pronto_jobs.errors, '[]'), '$[#]', json(c.err)) END,
		max_attempts = pronto_jobs.max_attempts + c.refund,
		lease_expires_at = NULL,
		worker_id = NULL
	FROM c
	WHERE pronto_jobs.id = c.id AND pronto_jobs.attempt = c.attempt AND pronto_jobs.state = 'active'
	RETURNING id, queue`)
	return b.String()
}

// finishBatchArgs is the number of values one row of finishBatchSQL binds.
const finishBatchArgs = 8

// heartbeatSQL extends the leases of up to n jobs (padding ids are NULL) held by one worker and returns
// the ids it extended. ?1 lease expiry, ?2 worker id, ?3... ids.
func heartbeatSQL(n int) string {
	ph := make([]string, n)
	for i := range ph {
		ph[i] = fmt.Sprintf("?%d", 3+i)
	}
	return `UPDATE pronto_jobs SET lease_expires_at = ?1
	WHERE id IN (` + strings.Join(ph, ", ") + `) AND state = 'active' AND worker_id = ?2
	RETURNING id`
}

// rescueSQL: ?1 now, ?2 now as JSON time text, ?3 limit.
const rescueSQL = `UPDATE pronto_jobs SET
		state = CASE WHEN attempt >= max_attempts THEN 'discarded' ELSE 'available' END,
		scheduled_at = CASE WHEN attempt >= max_attempts THEN scheduled_at ELSE ?1 END,
		completed_at = CASE WHEN attempt >= max_attempts THEN ?1 ELSE NULL END,
		errors = json_insert(COALESCE(errors, '[]'), '$[#]', json_object(
			'attempt', attempt, 'at', ?2, 'type', 'lease_expired',
			'message', 'lease expired: worker ' || COALESCE(worker_id, '(unknown)') || ' stopped heartbeating')),
		lease_expires_at = NULL,
		worker_id = NULL
	WHERE id IN (
		SELECT id FROM pronto_jobs WHERE state = 'active' AND lease_expires_at <= ?1
		ORDER BY lease_expires_at LIMIT ?3)
	RETURNING ` + jobColumns

// promoteSQL: ?1 now, ?2 limit.
const promoteSQL = `UPDATE pronto_jobs SET state = 'available'
	WHERE id IN (
		SELECT id FROM pronto_jobs WHERE state IN ('scheduled', 'retryable') AND scheduled_at <= ?1
		ORDER BY scheduled_at LIMIT ?2)
	RETURNING queue`

// discardExpiredSQL: ?1 now, ?2 now as JSON time text, ?3 limit.
const discardExpiredSQL = `UPDATE pronto_jobs SET
		state = 'discarded',
		completed_at = ?1,
		errors = json_insert(COALESCE(errors, '[]'), '$[#]', json_object(
			'attempt', attempt, 'at', ?2, 'type', 'expired', 'message', 'job expired before it started')),
		lease_expires_at = NULL,
		worker_id = NULL
	WHERE id IN (
		SELECT id FROM pronto_jobs
		WHERE expires_at IS NOT NULL AND state IN ('available', 'scheduled', 'retryable', 'pending')
		  AND expires_at <= ?1
		LIMIT ?3)`

// nextDueSQL: ?1 queue.
const nextDueSQL = `SELECT min(scheduled_at) FROM pronto_jobs
	WHERE queue = ?1 AND state IN ('scheduled', 'retryable')`

// cleanupScanSQL pages through jobs in rowid (insertion) order. ?1 rowid cursor, ?2 page size.
const cleanupScanSQL = `SELECT rowid, state, completed_at, created_at FROM pronto_jobs
	WHERE rowid > ?1 ORDER BY rowid LIMIT ?2`

// cleanupDeleteSQL deletes the candidates (a JSON array of rowids) that are still terminal and old
// enough. ?1 rowids, ?2 completed before, ?3 cancelled before, ?4 discarded before (NULL: keep).
const cleanupDeleteSQL = `DELETE FROM pronto_jobs
	WHERE rowid IN (SELECT value FROM json_each(?1))
	  AND ((state = 'completed' AND completed_at < ?2)
	    OR (state = 'cancelled' AND completed_at < ?3)
	    OR (state = 'discarded' AND completed_at < ?4))`

const getJobSQL = `SELECT ` + jobColumns + ` FROM pronto_jobs WHERE id = ?1`

// listJobsSQL: ?1 states, ?2 queues, ?3 kinds (JSON arrays or NULL), ?4 cursor, ?5 limit.
const listJobsSQL = `SELECT ` + jobColumns + ` FROM pronto_jobs
	WHERE id > ?4
	  AND (?1 IS NULL OR state IN (SELECT value FROM json_each(?1)))
	  AND (?2 IS NULL OR queue IN (SELECT value FROM json_each(?2)))
	  AND (?3 IS NULL OR kind IN (SELECT value FROM json_each(?3)))
	ORDER BY id LIMIT ?5`

// listJobsDescSQL is listJobsSQL in descending id order.
const listJobsDescSQL = `SELECT ` + jobColumns + ` FROM pronto_jobs
	WHERE id < ?4
	  AND (?1 IS NULL OR state IN (SELECT value FROM json_each(?1)))
	  AND (?2 IS NULL OR queue IN (SELECT value FROM json_each(?2)))
	  AND (?3 IS NULL OR kind IN (SELECT value FROM json_each(?3)))
	ORDER BY id DESC LIMIT ?5`

// cancelJobSQL: ?1 now, ?2 id.
const cancelJobSQL = `UPDATE pronto_jobs SET state = 'cancelled', completed_at = ?1, lease_expires_at = NULL,
		worker_id = NULL
	WHERE id = ?2 AND state NOT IN ('completed', 'cancelled', 'discarded')
	RETURNING ` + jobColumns

// retryJobSQL: ?1 now, ?2 id.
const retryJobSQL = `UPDATE pronto_jobs SET state = 'available', attempt = 0, scheduled_at = ?1,
		completed_at = NULL, lease_expires_at = NULL, worker_id = NULL
	WHERE id = ?2 AND state IN ('discarded', 'cancelled')
	RETURNING ` + jobColumns

// activateJobSQL: ?1 now, ?2 id.
const activateJobSQL = `UPDATE pronto_jobs SET state = 'available', scheduled_at = ?1
	WHERE id = ?2 AND state = 'pending'
	RETURNING ` + jobColumns

// deleteJobSQL: ?1 id.
const deleteJobSQL = `DELETE FROM pronto_jobs WHERE id = ?1 AND state <> 'active' RETURNING ` + jobColumns

const jobStateSQL = `SELECT state FROM pronto_jobs WHERE id = ?1`

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
