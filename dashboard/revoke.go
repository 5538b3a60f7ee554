package dashboard

import (
	"cmp"
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/pronto-jobs/pronto/store"
)

// RevokedSetting is the store setting (store.SettingStore) that lists logged-out dashboard sessions
// until they expire: a logout then ends the session on every server sharing the store and the API
// key, and across restarts, not only in the memory of the server that received it.
const RevokedSetting = "dashboard_revoked_sessions"

// revokedRefresh is how long a server trusts its copy of the shared list: a logout on another server
// takes effect here within it.
const revokedRefresh = 2 * time.Second

// maxRevoked bounds the shared list (a few hundred kB): past it, the revocations that expire
// soonest are dropped. Only a logout storm (thousands a month) reaches it.
const maxRevoked = 10000

// revocations are the logged-out sessions, by id, with their expiry (Unix seconds). A logout is
// effective at once on the server that received it; through the store, on the others within
// revokedRefresh.
type revocations struct {
	ss  store.SettingStore // nil when the store keeps no settings: this server only
	log *slog.Logger

	mu     sync.Mutex
	local  map[string]int64 // revoked here; kept even if the store write failed
	shared map[string]int64 // the store's list as last read
	// tried is when the store's list was last read, or a read of it last failed: either way the
	// copy in shared stands until revokedRefresh after it, so a store that does not answer costs
	// one read per revokedRefresh, not one per request.
	tried time.Time

	loadMu sync.Mutex // one read of the store at a time; the others wait for it
}

// revoked reports whether session id was logged out here or, as last read from the store, anywhere.
// The store's list is read again when older than revokedRefresh; if that read fails, the last copy
// stands for another revokedRefresh (requests that waited on the failed read use it too).
func (rv *revocations) revoked(ctx context.Context, id string, now time.Time) bool {
	rv.mu.Lock()
	_, out := rv.local[id]
	fresh := rv.ss == nil || now.Sub(rv.tried) < revokedRefresh
	_, shared := rv.shared[id]
	rv.mu.Unlock()
	if out || fresh {
		return out || shared
	}
	rv.loadMu.Lock()
	defer rv.loadMu.Unlock()
	rv.mu.Lock()
	fresh = now.Sub(rv.tried) < revokedRefresh // another request read it, or failed to, meanwhile
	rv.mu.Unlock()
	if !fresh {
		rctx, cancel := context.WithTimeout(ctx, revokedRefresh)
		m, err := rv.read(rctx)
		cancel()
		left := ctx.Err() != nil // a request that left says nothing of the store
		if err != nil && !left {
			rv.log.Warn("pronto dashboard: cannot read the logged-out sessions; using the last copy", "err", err)
		}
		rv.mu.Lock()
		if err == nil {
			rv.shared = m
		}
		if err == nil || !left {
			rv.tried = time.Now()
		}
		rv.mu.Unlock()
	}
	rv.mu.Lock()
	defer rv.mu.Unlock()
	_, shared = rv.shared[id]
	return shared
}

// revoke ends session id, valid until until: here at once, then in the store's list, changed
// atomically (store.UpdateSetting), so a concurrent logout on another server cannot drop it.
func (rv *revocations) revoke(ctx context.Context, id string, until time.Time) error {
	now := time.Now()
	rv.mu.Lock()
	if rv.local == nil {
		rv.local = map[string]int64{}
	}
	prune(rv.local, now)
	rv.local[id] = until.Unix()
	rv.mu.Unlock()
	if rv.ss == nil {
		return nil
	}
	var kept map[string]int64
	err := store.UpdateSetting(ctx, rv.ss, RevokedSetting, func(old json.RawMessage) (json.RawMessage, error) {
		m := map[string]int64{}
		if len(old) > 0 {
			if err := json.Unmarshal(old, &m); err != nil {
				// Not ours to fix by overwriting blindly; refuse like a failed read.
				return nil, err
			}
		}
		kept = m
		if _, ok := m[id]; ok {
			return old, nil
		}
		prune(m, now)
		m[id] = until.Unix()
		if len(m) > maxRevoked {
			ids := slices.SortedFunc(maps.Keys(m), func(a, b string) int { return cmp.Compare(m[a], m[b]) })
			for _, old := range ids[:len(m)-maxRevoked] {
				delete(m, old)
			}
		}
		return json.Marshal(m)
	})
	if err != nil {
		return err
	}
	rv.mu.Lock()
	rv.shared, rv.tried = kept, time.Now()
	rv.mu.Unlock()
	return nil
}

func (rv *revocations) read(ctx context.Context) (map[string]int64, error) {
	raw, err := rv.ss.GetSetting(ctx, RevokedSetting)
	if err != nil {
		return nil, err
	}
	m := map[string]int64{}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &m); err != nil {
			// Not ours to fix by overwriting blindly; refuse like a failed read.
			return nil, err
		}
	}
	return m, nil
}

// prune drops the sessions that expired by now: they are refused anyway.
func prune(m map[string]int64, now time.Time) {
	for k, until := range m {
		if now.Unix() >= until {
			delete(m, k)
		}
	}
}
