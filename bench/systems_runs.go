//go:build !benchworker

package main

// Which scenarios each system takes part in: the harness decides, so these stay out of the worker
// binaries.

// runs limits the unlogged variant to the throughput and WAL scenarios, the one with River tuned's
// workers, the one without prefetch and the one removing completed jobs to the drain, and the one without the hand-off to the pickup scenarios, the insert (which the hand-off's single
// inserts could slow) and crash recovery (which jobs handed to a killed process could slow).
func (p prontoPG) runs(sc scenario) bool {
	switch {
	case p.tunedWorkers, p.noPrefetch, p.remove:
		return sc.name == "drain"
	case p.unlogged:
		return sc.kind == "drain" || sc.kind == "insert" || sc.kind == "roundtrip" || sc.kind == "wal"
	case p.noHandoff:
		return sc.name == "notify_latency" || sc.name == "high_scale" || sc.kind == "insert" || sc.name == "crash_recovery"
	}
	return true
}

func (p prontoRedis) runs(sc scenario) bool {
	if p.remove {
		return sc.name == "drain"
	}
	return redisScenarios[sc.name]
}

func (prontoSQLiteProcs) runs(sc scenario) bool { return sqliteProcsScenarios[sc.name] }

func (prontoPGNoListen) runs(sc scenario) bool { return sqliteProcsScenarios[sc.name] }

// runs reports which scenarios the pickup floor takes part in: pickup when idle and at 300 Hz.
func (sqlPickup) runs(sc scenario) bool {
	return sc.name == "notify_latency" || sc.name == "high_scale"
}

// runs reports which scenarios the SQL limit takes part in: only the drain, the figure it bounds.
func (sqlLimit) runs(sc scenario) bool { return sc.kind == "drain" }

// redisScenarios are the scenarios pronto-redis runs: the River table's notify_latency,
// high_scale, drain, round_trip_max and crash_recovery, and the insert and steady_over rows the
// in-process stores run. The others (PostgreSQL's WAL, transactional processing modes) do not apply,
// or add little beside these.
var redisScenarios = map[string]bool{
	"notify_latency": true, "high_scale": true, "drain": true, "round_trip_max": true, "crash_recovery": true,
	"insert": true, "steady_over": true, "multi_process": true,
}

// sqliteProcsScenarios are the ones where pickup across processes shows.
var sqliteProcsScenarios = map[string]bool{"notify_latency": true, "high_scale": true, "multi_process": true}
