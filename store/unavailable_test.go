package store_test

import (
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
	} {
		if !store.IsUnavailable(nil, wrap(err)) {
			t.Errorf("%v: not unavailable", err)
		}
	}
	for _, err := range []error{
		nil, errors.New("boom"), wrap(store.ErrNotFound), wrap(store.ErrInvalidParams),
		sqlStateErr("23505"), sqlStateErr("22P02"), sqlStateErr("57014"), sqlStateErr("08"),
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
