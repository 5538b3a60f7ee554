package redis

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

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

// addUnreachableHook adds unreachableHook to rdb. A client shared by several stores gets one hook
// per store; each after the first changes nothing (unreachable leaves a marked error alone).
func addUnreachableHook(rdb goredis.UniversalClient) { rdb.AddHook(unreachableHook{}) }

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
