package redis

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// ErrReplyLost is wrapped by the error of a call on a Redis Cluster whose connection failed after
// the command was sent: the command may have run, so its outcome is unknown. It is not resent (see
// NewClusterClient), and Store.Unavailable counts it as unavailable, as a single node's lost
// connection is.
var ErrReplyLost = errors.New("redis: connection lost after the command was sent, its outcome is unknown")

// NewClusterClient returns a cluster client configured as Open configures the one it makes: context
// deadlines honoured, no command sent twice, and the slot map reloaded when a node cannot be
// reached. Use it to build a cluster client for New by hand; opt is changed.
//
// MaxRetries -1 reaches only the per-node clients: the cluster client itself resends a command
// after io.EOF, a network error or a timeout (its MaxRedirects loop, kept for MOVED and ASK during
// a failover). A hook on every node client turns such an error into one wrapping ErrReplyLost,
// which the cluster client does not retry. A dial error (nothing was sent) is still retried, and
// both kinds reload the slot map: a dead master never answers MOVED, and without the reload every
// call to its slots would go to its address until go-redis's periodic reload, a minute later.
func NewClusterClient(opt *goredis.ClusterOptions) *goredis.ClusterClient {
	opt.ContextTimeoutEnabled = true // see contextTimeouts
	opt.MaxRetries = -1              // see noRetries
	h := &nodeHook{}
	newClient := opt.NewClient
	opt.NewClient = func(o *goredis.Options) *goredis.Client {
		var c *goredis.Client
		if newClient != nil {
			c = newClient(o)
		} else {
			c = goredis.NewClient(o)
		}
		c.AddHook(h)
		return c
	}
	cc := goredis.NewClusterClient(opt)
	h.cluster.Store(cc)
	return cc
}

// nodeHook is the hook of a cluster's node clients (see NewClusterClient).
type nodeHook struct {
	cluster atomic.Pointer[goredis.ClusterClient]

	mu       sync.Mutex
	answered map[goredis.Cmder]time.Time // see remember
	held     atomic.Int32                // len(answered), read without mu on every pipeline
}

func (h *nodeHook) DialHook(next goredis.DialHook) goredis.DialHook { return next }

func (h *nodeHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		err := next(ctx, cmd)
		if err == nil {
			return nil
		}
		h.reload(cmd, err)
		if sentAndLost(ctx, err) {
			err = fmt.Errorf("%w: %v", ErrReplyLost, err)
			cmd.SetErr(err)
		}
		return err
	}
}

func (h *nodeHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		// After a lost connection the cluster client queues the node's whole batch for another
		// attempt before this hook sees it: the commands whose reply was lost (ErrReplyLost) and those
		// answered before it (remembered) are not sent again.
		send, held := h.unsent(cmds)
		if len(send) == 0 {
			return held
		}
		err := next(ctx, send)
		var lost error
		for _, cmd := range send {
			cerr := cmd.Err()
			if cerr == nil {
				continue
			}
			h.reload(cmd, cerr)
			if sentAndLost(ctx, cerr) {
				cerr = fmt.Errorf("%w: %v", ErrReplyLost, cerr)
				cmd.SetErr(cerr)
				if lost == nil {
					lost = cerr
				}
			}
		}
		if lost == nil {
			return err
		}
		h.remember(send)
		if err != nil && !isRedisError(err) {
			return lost
		}
		return err
	}
}

// answeredTTL bounds how long a command answered in a batch whose connection was lost is remembered:
// the cluster client queues it again at once, or not at all.
const answeredTTL = time.Minute

// unsent returns the commands of cmds to send, leaving out those already sent (see
// ProcessPipelineHook), and the error of one whose reply was lost.
func (h *nodeHook) unsent(cmds []goredis.Cmder) (send []goredis.Cmder, held error) {
	remembered := h.held.Load() > 0
	if remembered {
		h.mu.Lock()
		defer h.mu.Unlock()
	}
	for i, cmd := range cmds {
		answered := false
		if remembered {
			_, answered = h.answered[cmd]
		}
		err := cmd.Err()
		if !answered && !errors.Is(err, ErrReplyLost) {
			if send != nil {
				send = append(send, cmd)
			}
			continue
		}
		if send == nil {
			send = append(make([]goredis.Cmder, 0, len(cmds)), cmds[:i]...)
		}
		if answered {
			delete(h.answered, cmd)
			h.held.Store(int32(len(h.answered)))
		}
		if held == nil && err != nil {
			held = err
		}
	}
	if send == nil && held == nil {
		return cmds, nil
	}
	return send, held
}

// remember records the commands of a batch whose connection was lost that Redis answered (all but
// the lost ones and the redirected, which were not applied).
func (h *nodeHook) remember(cmds []goredis.Cmder) {
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.answered == nil {
		h.answered = map[goredis.Cmder]time.Time{}
	}
	for c, at := range h.answered {
		if now.Sub(at) > answeredTTL {
			delete(h.answered, c)
		}
	}
	for _, cmd := range cmds {
		err := cmd.Err()
		if errors.Is(err, ErrReplyLost) || (err != nil && !isRedisError(err)) || redirected(err) {
			continue
		}
		h.answered[cmd] = now
	}
	h.held.Store(int32(len(h.answered)))
}

// redirected reports whether err is a MOVED or ASK reply: the command ran nowhere.
func redirected(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	return strings.HasPrefix(msg, "MOVED ") || strings.HasPrefix(msg, "ASK ")
}

// reload asks the cluster client to reload its slot map after a call failed for want of a node:
// refused, dropped or silent, as a master that died is until its replica takes over. go-redis
// coalesces the requests (one reload at a time, at most one every 200 ms). Its own reload's CLUSTER
// calls are left out, so that a dead node it asks does not keep it reloading.
func (h *nodeHook) reload(cmd goredis.Cmder, err error) {
	cc := h.cluster.Load()
	if cc == nil || isRedisError(err) || errors.Is(err, context.Canceled) || cmd.Name() == "cluster" {
		return
	}
	var ne net.Error
	if errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		cc.ReloadState(context.Background())
	}
}

// sentAndLost reports whether err is a transport error after the command may have reached the
// server: a connection closed, reset or timed out under it. A dial error (nothing sent), an error
// reply, and an error of the caller's context (its deadline, answered as such) are not.
func sentAndLost(ctx context.Context, err error) bool {
	if ctx.Err() != nil || isRedisError(err) || errors.Is(err, ErrReplyLost) {
		return false
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return false
	}
	var ne net.Error
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &ne)
}
