package store_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/memory"
)

type sqlStateErr string

func (e sqlStateErr) Error() string    { return "pg error " + string(e) }
func (e sqlStateErr) SQLState() string { return string(e) }

// classifyingStore is a store whose client library says which of its errors mean unavailable.
type classifyingStore struct {
	*memory.Store
	sign error
}

func (s classifyingStore) Unavailable(err error) bool { return errors.Is(err, s.sign) }

// TestIsUnavailable: the generic signs of an unreachable backend, wrapped as the stores wrap them,
// are told from errors that are not about reaching it, and a store's own classifier is asked last.
func TestIsUnavailable(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("pronto: insert 1 job(s): %w", err) }
	for _, err := range []error{
		&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED},
		syscall.ECONNRESET, io.EOF, io.ErrUnexpectedEOF, net.ErrClosed,
		sqlStateErr("08006"), sqlStateErr("57P01"), sqlStateErr("57P03"), sqlStateErr("53300"),
		// The server's condition, not the request's: read-only after a failover, a lock held past
		// lock_timeout, statement_timeout, a session ended by an idle timeout.
		sqlStateErr("25006"), sqlStateErr("55P03"), sqlStateErr("57014"), sqlStateErr("57P05"), sqlStateErr("25P03"),
	} {
		if !store.IsUnavailable(nil, wrap(err)) {
			t.Errorf("%v: not unavailable", err)
		}
	}
	for _, err := range []error{
		nil, errors.New("boom"), wrap(store.ErrNotFound), wrap(store.ErrInvalidParams),
		sqlStateErr("23505"), sqlStateErr("22P02"), sqlStateErr("40001"), sqlStateErr("08"),
	} {
		if store.IsUnavailable(nil, err) {
			t.Errorf("%v: unavailable", err)
		}
	}
	sign := errors.New("pool timeout")
	s := classifyingStore{Store: memory.New(), sign: sign}
	if !store.IsUnavailable(s, wrap(sign)) || store.IsUnavailable(s, wrap(errors.New("other"))) {
		t.Error("the store's classifier is not asked, or answers for other errors")
	}
	if store.IsUnavailable(memory.New(), wrap(sign)) {
		t.Error("a store without a classifier calls its error unavailable")
	}
}

// refusalStore is a store that tells its data errors apart, as the PostgreSQL store does.
type refusalStore struct {
	*memory.Store
	sign error
}

func (s refusalStore) Refused(err error) bool { return errors.Is(err, s.sign) }

// TestIsRefused: only an error the request's data causes is a refusal for a store that tells them
// apart: SQLSTATE classes 22, 23 and 54, ErrInvalidParams and the store's own. A timeout, a
// serialization failure, a lock timeout or an outage may pass if tried again. A store that does not
// tell them apart has every error it may not recover from taken for a refusal.
func TestIsRefused(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("pronto: finish 1 jobs: %w", err) }
	sign := errors.New("value too large for the script")
	s := refusalStore{Store: memory.New(), sign: sign}
	for _, err := range []error{
		sqlStateErr("22003"), sqlStateErr("22P05"), sqlStateErr("23505"), sqlStateErr("23514"),
		sqlStateErr("54000"), store.ErrInvalidParams, sign,
	} {
		if !store.IsRefused(s, wrap(err)) {
			t.Errorf("%v: not refused", err)
		}
	}
	for _, err := range []error{
		nil, errors.New("boom"), context.DeadlineExceeded, context.Canceled, io.EOF, store.ErrClosed,
		sqlStateErr("55P03"), sqlStateErr("57014"), sqlStateErr("25006"), sqlStateErr("40001"),
		sqlStateErr("40P01"), sqlStateErr("42P01"), sqlStateErr("XX000"), sqlStateErr("08006"),
	} {
		if store.IsRefused(s, wrap(err)) {
			t.Errorf("%v: refused", err)
		}
	}
	if !store.IsRefused(memory.New(), wrap(errors.New("boom"))) || !store.IsRefused(nil, wrap(errors.New("boom"))) {
		t.Error("a store that does not tell its errors apart has an unknown error retried forever")
	}
	if store.IsRefused(memory.New(), wrap(sqlStateErr("55P03"))) || store.IsRefused(nil, wrap(context.DeadlineExceeded)) {
		t.Error("a store that does not tell its errors apart has a temporary error given up")
	}
	if code, ok := store.RefusedSQLState(wrap(sqlStateErr("22021"))); !ok || code != "22021" {
		t.Errorf("RefusedSQLState: %q %v", code, ok)
	}
	if _, ok := store.RefusedSQLState(wrap(sqlStateErr("55P03"))); ok {
		t.Error("RefusedSQLState: 55P03 is not the data's fault")
	}
}
