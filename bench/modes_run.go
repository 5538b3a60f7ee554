//go:build !benchworker

package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// runModes drains a backlog once per mode, each in a fresh instance (so neither mode works beside the
// other's finished jobs), the order alternating between runs.
func runModes(rc *runCtx) error {
	order := []int{modeStaged, modeAtomic}
	if rc.res.Run%2 == 0 {
		order = []int{modeAtomic, modeStaged}
	}
	for k, mode := range order {
		mrc := rc
		if k > 0 {
			fresh, cleanup, err := freshInstance(rc, "_"+modeNames[mode][:1])
			if err != nil {
				return fmt.Errorf("%s: %w", modeNames[mode], err)
			}
			defer cleanup()
			mrc = fresh
		}
		if err := drainMode(mrc, mode); err != nil {
			return fmt.Errorf("%s: %w", modeNames[mode], err)
		}
	}
	rc.res.set("atomic_vs_staged", rc.res.get("atomic_jobs_per_s")/rc.res.get("staged_jobs_per_s"))
	return nil
}

// freshInstance creates and opens another instance of rc's system, named rc.id+suffix.
func freshInstance(rc *runCtx, suffix string) (*runCtx, func(), error) {
	id := rc.id + suffix
	if err := rc.sys.create(rc.ctx, rc.e, id); err != nil {
		return nil, nil, fmt.Errorf("create: %w", err)
	}
	drop := func() {
		if err := rc.sys.drop(context.Background(), rc.e, id); err != nil {
			rc.res.Errors = append(rc.res.Errors, "drop: "+err.Error())
		}
	}
	inst, err := rc.sys.open(rc.ctx, rc.e, id)
	if err != nil {
		drop()
		return nil, nil, fmt.Errorf("open: %w", err)
	}
	c := *rc
	c.inst, c.id = inst, id
	return &c, func() { inst.close(); drop() }, nil
}

// drainMode loads a backlog of jobs of one mode, works it, and records the mode's jobs/s. It then
// checks the outcome: exactly one application row per job, and every job completed.
func drainMode(rc *runCtx, mode int) error {
	sc, res, name := rc.sc, rc.res, modeNames[mode]
	p := rc.inst.pool()
	if p == nil {
		return errors.New("processing_modes needs PostgreSQL")
	}
	table := effectsTable(rc.id)
	if _, err := p.Exec(rc.ctx, "CREATE TABLE "+table+" (seq bigint NOT NULL, attempt integer NOT NULL)"); err != nil {
		return fmt.Errorf("creating the application table: %w", err)
	}
	now := time.Now().UnixNano()
	const batch = 5000
	for off := 0; off < sc.backlog; off += batch {
		as := make([]benchArgs, min(batch, sc.backlog-off))
		for i := range as {
			as[i] = benchArgs{Seq: int64(off + i), Ins: now, Mode: mode}
		}
		if err := rc.inst.bulkLoad(rc.ctx, as); err != nil {
			return fmt.Errorf("loading the backlog: %w", err)
		}
	}
	rec := newRecorder(0, false)
	workers := rc.sys.workersFor(sc.name, sc.workers)
	h, err := rc.startHost(workers, 1, rec)
	if err != nil {
		return err
	}
	ready, err := h.readyAt(30 * time.Second)
	if err != nil {
		h.stop()
		return err
	}
	deadline := time.Now().Add(sc.tail)
	for time.Now().Before(deadline) && rec.okEnds.Load() < int64(sc.backlog) {
		time.Sleep(5 * time.Millisecond)
	}
	// As in drain: the drain ends when the last outcome is in the database.
	persisted, perr := waitPersisted(rc, int64(sc.backlog), deadline)
	_, _, cpu := h.stop()
	if perr != nil {
		return fmt.Errorf("backlog of %d not drained within %s: %w", sc.backlog, sc.tail, perr)
	}
	first := ready
	for _, e := range rec.events() {
		if e.kind == 'E' && e.start < first {
			first = e.start
		}
	}
	el := float64(persisted.UnixNano()-first) / 1e9
	res.set("workers", float64(workers))
	res.set(name+"_jobs_per_s", float64(sc.backlog)/el)
	res.set(name+"_drain_s", el)
	res.set(name+"_cpu_us_per_job", cpu*1e6/float64(sc.backlog))

	// Correctness, after the workers stopped: one row per job, no row twice, every job completed.
	var rows, distinct, lo, hi int64
	if err := p.QueryRow(rc.ctx, "SELECT count(*), count(DISTINCT seq), coalesce(min(seq), -1), coalesce(max(seq), -1) FROM "+table).
		Scan(&rows, &distinct, &lo, &hi); err != nil {
		return fmt.Errorf("reading the application table: %w", err)
	}
	completed, err := countCompleted(rc)
	if err != nil {
		return fmt.Errorf("counting completed jobs: %w", err)
	}
	n := int64(sc.backlog)
	res.set(name+"_duplicate_rows", float64(rows-distinct))
	res.set(name+"_jobs_not_completed", float64(n-completed))
	var bad []error
	if rows != n || distinct != n || lo != 0 || hi != n-1 {
		bad = append(bad, fmt.Errorf("the application table has %d rows for %d distinct jobs (seq %d..%d); want exactly one row for each of the %d jobs", rows, distinct, lo, hi, n))
	}
	if completed != n {
		bad = append(bad, fmt.Errorf("%d of %d jobs completed", completed, n))
	}
	return errors.Join(bad...)
}

// countCompleted counts the jobs of rc's instance in the completed state.
func countCompleted(rc *runCtx) (int64, error) {
	var table string
	switch rc.sys.(type) {
	case prontoPG:
		table = pgx.Identifier{rc.id, "jobs"}.Sanitize()
	case riverSys:
		table = pgx.Identifier{rc.id, "river_job"}.Sanitize()
	default:
		return 0, fmt.Errorf("no count of completed jobs for %s", rc.sys.name())
	}
	var n int64
	err := rc.inst.pool().QueryRow(rc.ctx, "SELECT count(*) FROM "+table+" WHERE state = 'completed'").Scan(&n)
	return n, err
}

var modeNames = map[int]string{modeStaged: "staged", modeAtomic: "atomic"}
