package store_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pronto-jobs/pronto/internal/testdb"
	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/memory"
	"github.com/pronto-jobs/pronto/store/postgres"
)

// redisReply is an error reply as go-redis's are: it has a RedisError method.
type redisReply string

func (e redisReply) Error() string { return string(e) }
func (redisReply) RedisError()     {}

// TestConditionOf: a backend that answered with a condition of its own (a lock or statement
// timeout, read-only, out of resources) is told from one that cannot be reached, and every
// condition but "error" is an error IsUnavailable reports (or a deadline), so that what operators
// see and what the HTTP API answers agree.
func TestConditionOf(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("pronto: list queues: %w", err) }
	for _, c := range []struct {
		err  error
		want store.Condition
	}{
		{nil, store.ConditionNone},
		{&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, store.ConditionUnreachable},
		{&net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "db"}}, store.ConditionUnreachable},
		{syscall.ECONNRESET, store.ConditionUnreachable},
		{io.EOF, store.ConditionUnreachable},
		{store.ErrClosed, store.ConditionUnreachable},
		{sqlStateErr("08006"), store.ConditionUnreachable},
		{sqlStateErr("57P01"), store.ConditionUnreachable},
		{sqlStateErr("57P03"), store.ConditionUnreachable},
		{context.DeadlineExceeded, store.ConditionTimeout},
		{sqlStateErr("55P03"), store.ConditionLockTimeout},
		{sqlStateErr("57014"), store.ConditionStatementTimeout},
		{sqlStateErr("25006"), store.ConditionReadOnly},
		{sqlStateErr("57P05"), store.ConditionIdleSessionTimeout},
		{sqlStateErr("25P03"), store.ConditionIdleSessionTimeout},
		{sqlStateErr("53300"), store.ConditionInsufficientResources},
		{sqlStateErr("53100"), store.ConditionInsufficientResources},
		{sqlStateErr("23505"), store.ConditionError},
		{sqlStateErr("40001"), store.ConditionError},
		{errors.New("boom"), store.ConditionError},
		{store.ErrNotFound, store.ConditionError},
	} {
		got := store.ConditionOf(nil, wrap(c.err))
		if c.err == nil {
			got = store.ConditionOf(nil, nil)
		}
		if got != c.want {
			t.Errorf("%v: %q, want %q", c.err, got, c.want)
		}
		if c.err == nil || c.want == store.ConditionTimeout {
			continue
		}
		if unavailable := store.IsUnavailable(nil, wrap(c.err)); unavailable != (c.want != store.ConditionError) {
			t.Errorf("%v: condition %q but IsUnavailable %v", c.err, got, unavailable)
		}
		if got.Message() == "" {
			t.Errorf("%q has no message", got)
		}
	}
	// A store's classifier says unavailable: named by what is known (Redis READONLY is read-only).
	sign := errors.New("pool timeout")
	s := classifyingStore{Store: memory.New(), sign: sign}
	if got := store.ConditionOf(s, wrap(sign)); got != store.ConditionUnavailable {
		t.Errorf("a store's own unavailable error: %q", got)
	}
	ro := redisReply("READONLY You can't write against a read only replica.")
	rs := classifyingStore{Store: memory.New(), sign: ro}
	if got := store.ConditionOf(rs, wrap(ro)); got != store.ConditionReadOnly {
		t.Errorf("Redis READONLY: %q", got)
	}
	if got := store.ConditionOf(s, wrap(errors.New("other"))); got != store.ConditionError {
		t.Errorf("an error the store does not call unavailable: %q", got)
	}
	for _, c := range []store.Condition{store.ConditionLockTimeout, store.ConditionStatementTimeout, store.ConditionReadOnly} {
		if !c.Reachable() {
			t.Errorf("%q: not reachable", c)
		}
	}
	if store.ConditionUnreachable.Reachable() || store.ConditionTimeout.Reachable() {
		t.Error("unreachable or timeout reported as reachable")
	}
	if !store.ConditionLockTimeout.PerRequest() || store.ConditionReadOnly.PerRequest() || store.ConditionUnreachable.PerRequest() {
		t.Error("PerRequest")
	}
}

// TestConditionOfPostgres: on a real server, a read meeting another session's lock past
// lock_timeout is "lock_timeout", past statement_timeout "statement_timeout", a write on a
// read-only session "read_only", a server that refuses connections and a closed pool
// "unreachable"; each still IsUnavailable, as the HTTP API wants it.
func TestConditionOfPostgres(t *testing.T) {
	ctx := context.Background()
	schema := testdb.Schema(t)
	plain, err := postgres.New(testdb.NewPool(t, 2), postgres.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if err := plain.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	unlock := testdb.LockTable(t, schema+".jobs")
	check := func(st store.Store, err error, want store.Condition) {
		t.Helper()
		if err == nil {
			t.Fatalf("want %q, got no error", want)
		}
		if got := store.ConditionOf(st, err); got != want {
			t.Fatalf("%v: condition %q, want %q", err, got, want)
		}
		if !store.IsUnavailable(st, err) {
			t.Fatalf("%v: no longer IsUnavailable", err)
		}
	}
	for _, c := range []struct {
		setting string
		want    store.Condition
	}{
		{"lock_timeout", store.ConditionLockTimeout},
		{"statement_timeout", store.ConditionStatementTimeout},
	} {
		st := pgSettingStore(t, testdb.URL(), schema, c.setting, "100ms")
		_, err := st.GetJob(ctx, "00000000-0000-7000-8000-000000000000")
		check(st, err, c.want)
	}
	unlock()

	ro := pgSettingStore(t, testdb.URL(), schema, "default_transaction_read_only", "on")
	_, err = ro.Insert(ctx, []*store.InsertParams{{ID: "01900000-0000-7000-8000-000000000001", Kind: "k", Queue: "default",
		Args: []byte("[]"), State: store.StateAvailable, MaxAttempts: 1}})
	check(ro, err, store.ConditionReadOnly)

	down := pgSettingStore(t, "postgres://postgres@127.0.0.1:1/test?connect_timeout=2", schema, "application_name", "down")
	_, err = down.GetJob(ctx, "00000000-0000-7000-8000-000000000000")
	check(down, err, store.ConditionUnreachable)

	closed := pgSettingStore(t, testdb.URL(), schema, "application_name", "closed")
	closed.Pool().Close()
	_, err = closed.GetJob(ctx, "00000000-0000-7000-8000-000000000000")
	check(closed, err, store.ConditionUnreachable)
}

// pgSettingStore is a store on url and schema whose sessions carry one setting, as ALTER ROLE ...
// SET gives them.
func pgSettingStore(t *testing.T, url, schema, name, value string) *postgres.Store {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 2
	cfg.ConnConfig.RuntimeParams[name] = value
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	st, err := postgres.New(pool, postgres.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// namingStore is a store whose classifiers call sign unavailable and name every error cond.
type namingStore struct {
	classifyingStore
	cond store.Condition
}

func (s namingStore) Condition(error) store.Condition { return s.cond }

// TestConditionClassifier: a store's own names (SQLite busy, Redis loading, ...) are taken for the
// errors it calls unavailable, never for others, so ConditionOf keeps agreeing with IsUnavailable;
// each has a message of its own, says the backend answered and concerns every request.
func TestConditionClassifier(t *testing.T) {
	sign := errors.New("the backend's own sign")
	for _, c := range []store.Condition{store.ConditionBusy, store.ConditionLoading, store.ConditionBusyScript,
		store.ConditionMasterDown, store.ConditionClusterDown} {
		s := namingStore{classifyingStore{Store: memory.New(), sign: sign}, c}
		if got := store.ConditionOf(s, fmt.Errorf("pronto: insert: %w", sign)); got != c {
			t.Errorf("named %q: %q", c, got)
		}
		if got := store.ConditionOf(s, errors.New("other")); got != store.ConditionError {
			t.Errorf("an error the store does not call unavailable, named %q: %q", c, got)
		}
		if got := store.ConditionOf(s, context.DeadlineExceeded); got != store.ConditionTimeout {
			t.Errorf("a deadline, named %q: %q", c, got)
		}
		if m := c.Message(); m == store.ConditionUnavailable.Message() || m == store.ConditionError.Message() {
			t.Errorf("%q: generic message %q", c, m)
		}
		if !c.Reachable() || c.PerRequest() {
			t.Errorf("%q: reachable %v, per request %v", c, c.Reachable(), c.PerRequest())
		}
	}
}
