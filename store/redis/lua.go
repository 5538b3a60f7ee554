package redis

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"

	goredis "github.com/redis/go-redis/v9"
)

// The scripts of scripts.go are not sent as EVALSHA scripts but loaded as one Redis Functions
// library (FUNCTION LOAD) and called by FCALL: the prelude's helpers are then defined once, when
// the library loads, instead of on every call (an EVALSHA of the prelude and `return 0` took 10-11
// µs of server time, an FCALL of a no-op function of such a library 1.4 µs; docs/redis.md,
// "Per-job cost").
//
// The library's name and its functions' names carry a hash of its code, so processes running
// different versions of the store share a Redis without calling each other's code. The library is
// loaded by Migrate and again by the first call that finds it missing (a fresh, restarted or
// flushed server), on every master of a cluster.

// luaFunc is one function of the library: name, and its body, which reads KEYS and ARGV as a
// script does and has the prelude's helpers in scope.
type luaFunc struct {
	name string
	body string
	full string // the name in the server, set by library
	// freeing: the function frees memory (deletes), or writes next to nothing (leadership), so it
	// runs while Redis is over maxmemory under noeviction (flag allow-oom), which refuses every
	// other function: an operator can delete jobs, and retention can clean up, to recover.
	freeing bool
	// readOnly: the function writes nothing (flag no-writes), so Redis runs it when full as it runs
	// any read (without the flag it takes every function for a write and refuses it), and during
	// CLIENT PAUSE WRITE. Redis refuses any write it tries.
	readOnly bool
}

var (
	libFuncs []*luaFunc
	libOnce  sync.Once
	libCode  string
	libHash  string
)

// newFunc adds a function to the library.
func newFunc(name, body string) *luaFunc {
	f := &luaFunc{name: name, body: body}
	libFuncs = append(libFuncs, f)
	return f
}

// newFreeingFunc is newFunc for a function that frees memory or writes next to nothing (see
// luaFunc.freeing).
func newFreeingFunc(name, body string) *luaFunc {
	f := newFunc(name, body)
	f.freeing = true
	return f
}

// newReadFunc is newFunc for a function that writes nothing (see luaFunc.readOnly).
func newReadFunc(name, body string) *luaFunc {
	f := newFunc(name, body)
	f.readOnly = true
	return f
}

// library returns the library's code and its hash (built once, after every newFunc of the package
// ran at initialisation).
func library() (string, string) {
	libOnce.Do(func() {
		var b strings.Builder
		// KEYS, ARGV, B, G, decided, released, dropped, needed, relay, heldback, limhits, zq, zkeys and filed are set by
		// each function as it starts (see prelude).
		b.WriteString("local KEYS, ARGV, B, G, zq, zkeys, filed\n")
		b.WriteString(preludeBody)
		b.WriteString("\nlocal function claimjobs()\n" + claimBody + "\nend\n")
		for _, f := range libFuncs {
			flags := "'allow-cross-slot-keys'"
			switch {
			case f.readOnly:
				flags += ", 'no-writes'"
			case f.freeing:
				flags += ", 'allow-oom'"
			}
			b.WriteString("\nredis.register_function{function_name = 'pronto_@_" + f.name + "', flags = {" + flags + "}, callback = function(keys, args)\n")
			b.WriteString("KEYS, ARGV, B = keys, args, keys[1]\nG = string.match(B or '', '^(.-){') or B\ndecided, released, dropped, needed, relay, heldback, limhits, zq, zkeys, filed = {}, false, {}, false, false, false, false, false, nil, false\n")
			b.WriteString(f.body)
			b.WriteString("\nend}\n")
		}
		sum := sha1.Sum([]byte(b.String()))
		libHash = hex.EncodeToString(sum[:8])
		libCode = "#!lua name=pronto_" + libHash + "\n" + strings.ReplaceAll(b.String(), "'pronto_@_", "'pronto_"+libHash+"_")
		for _, f := range libFuncs {
			f.full = "pronto_" + libHash + "_" + f.name
		}
	})
	return libCode, libHash
}

// fname is the function's name in the server.
func (f *luaFunc) fname() string {
	library()
	return f.full
}

// call sends FCALL on c (a client or a pipeline) without loading the library first.
func (f *luaFunc) call(ctx context.Context, c goredis.Cmdable, keys []string, args ...any) *goredis.Cmd {
	return c.FCall(ctx, f.fname(), keys, args...)
}

// Run calls the function on c, loading the library and calling again when the server lacks it.
// When the library cannot be loaded the command carries the load's error (a full Redis's OOM, an
// ACL user's NOPERM), which says what to fix; the missing function only says it failed.
func (f *luaFunc) Run(ctx context.Context, c goredis.Cmdable, keys []string, args ...any) *goredis.Cmd {
	cmd := f.call(ctx, c, keys, args...)
	if noFunction(cmd.Err()) {
		if err := loadLibrary(ctx, c); err != nil {
			cmd.SetErr(err)
			return cmd
		}
		cmd = f.call(ctx, c, keys, args...)
	}
	return cmd
}

// do sends cmd, a whole FCALL of the function (built by the caller, its name from fname), on c,
// loading the library and sending it again when the server lacks it (a failed load as in Run).
func (f *luaFunc) do(ctx context.Context, c goredis.UniversalClient, cmd []any) *goredis.Cmd {
	r := c.Do(ctx, cmd...)
	if noFunction(r.Err()) {
		if err := loadLibrary(ctx, c); err != nil {
			r.SetErr(err)
			return r
		}
		r = c.Do(ctx, cmd...)
	}
	return r
}

// noFunction reports whether err says the server has no such function (the library is not loaded).
func noFunction(err error) bool {
	return err != nil && strings.Contains(err.Error(), "Function not found")
}

// loadLibrary loads the library on c's server (every master of a cluster); a library already
// loaded under its name (the same code) is fine. Its error wraps the server's, so that
// Store.Unavailable reads a full Redis's OOM as it does for any other call.
func loadLibrary(ctx context.Context, c goredis.Cmdable) error {
	code, _ := library()
	load := func(c goredis.Cmdable) error {
		err := c.FunctionLoad(ctx, code).Err()
		if err != nil && strings.Contains(err.Error(), "already exists") {
			return nil
		}
		return err
	}
	var err error
	if cc, ok := c.(*goredis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, m *goredis.Client) error { return load(m) })
	} else {
		err = load(c)
	}
	if err == nil {
		return nil
	}
	if strings.Contains(strings.ToLower(err.Error()), "unknown command") {
		return fmt.Errorf("load the store's function library (Redis 7 or newer is required): %w", err)
	}
	return fmt.Errorf("load the store's function library: %w", err)
}
