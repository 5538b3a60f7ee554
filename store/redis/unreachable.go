package redis

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"time"
	"weak"

	goredis "github.com/redis/go-redis/v9"
)

// errUnreachable marks the error of a call that did not get through to Redis: errors.Is(err,
// errUnreachable), and the message starts "cannot reach Redis".
var errUnreachable = errors.New("cannot reach Redis")

// unreachable adds errUnreachable to err when err is the network's (see offline), so that an
// outage reads as such rather than as a bare "i/o timeout" or "connection refused", and returns
// any other err as it is. When ctx is done, its error joins the chain too: go-redis reports a read
// cut at ctx's deadline as the socket's timeout, and callers tell their own deadline apart by
// errors.Is(err, context.DeadlineExceeded).
func unreachable(ctx context.Context, err error) error {
	if !offline(err) {
		return err
	}
	cerr := ctx.Err()
	if d, ok := ctx.Deadline(); ok && cerr == nil && !time.Now().Before(d) {
		cerr = context.DeadlineExceeded // the socket's deadline can fire before ctx's timer
	}
	if cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("%w: %w (%w)", errUnreachable, err, cerr)
	}
	return fmt.Errorf("%w: %w", errUnreachable, err)
}

// offline reports whether err is the network's and not yet marked by unreachable: a refused or
// broken connection, a read or dial timing out, go-redis's pool timing out, or a context's deadline
// (a net.Error too) passing while the call waited for a connection (go-redis returns it bare
// when the connection's dial or handshake does not finish in time).
func offline(err error) bool {
	if err == nil || errors.Is(err, errUnreachable) {
		return false
	}
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, goredis.ErrPoolTimeout)
}

// unreachableHook marks the errors of every command and pipeline of a client (see unreachable):
// it is the one place every call of the store and the Notifier goes through, so that each of their
// methods, and their background work, names Redis when it cannot be reached. A hook must set the
// commands' own errors (cmd.SetErr): most calls read those, not the hook's result.
type unreachableHook struct{}

// addUnreachableHook adds unreachableHook to rdb once: a client shared by several stores and
// notifiers, or by stores made one after another on it, keeps one hook, not one more per New (a
// hook is a call on every command, and the chain would only grow). The clients hooked are
// remembered by weak pointer and forgotten when collected. A client of another type than
// go-redis's own is hooked each time (a second hook changes nothing: unreachable leaves a marked
// error alone).
func addUnreachableHook(rdb goredis.UniversalClient) {
	if key, ok := clientKey(rdb); ok {
		if _, done := hookedClients.LoadOrStore(key, struct{}{}); done {
			return
		}
		forgetWhenCollected(rdb, key)
	}
	rdb.AddHook(unreachableHook{})
}

// hookedClients holds the clients addUnreachableHook hooked (clientKey -> struct{}).
var hookedClients sync.Map

// clientKey is the key of rdb in hookedClients: a weak pointer to go-redis's client, so that
// remembering a client does not keep it alive.
func clientKey(rdb goredis.UniversalClient) (any, bool) {
	switch c := rdb.(type) {
	case *goredis.Client:
		return weak.Make(c), true
	case *goredis.ClusterClient:
		return weak.Make(c), true
	case *goredis.Ring:
		return weak.Make(c), true
	}
	return nil, false
}

// forgetWhenCollected removes key from hookedClients once rdb is garbage.
func forgetWhenCollected(rdb goredis.UniversalClient, key any) {
	forget := func(k any) { hookedClients.Delete(k) }
	switch c := rdb.(type) {
	case *goredis.Client:
		runtime.AddCleanup(c, forget, key)
	case *goredis.ClusterClient:
		runtime.AddCleanup(c, forget, key)
	case *goredis.Ring:
		runtime.AddCleanup(c, forget, key)
	}
}

func (unreachableHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (unreachableHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		err := next(ctx, cmd)
		if offline(err) {
			err = unreachable(ctx, err)
			cmd.SetErr(err)
		}
		return err
	}
}

func (unreachableHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			if offline(cmd.Err()) {
				cmd.SetErr(unreachable(ctx, cmd.Err()))
			}
		}
		return unreachable(ctx, err)
	}
}
