package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// SettingStore keeps small cluster-wide settings as JSON values under string keys (maintenance
// mode, ojs-admin-api.md 12.1). It is optional, as WorkerStore is.
type SettingStore interface {
	// GetSetting returns the value under key, or nil when none is set.
	GetSetting(ctx context.Context, key string) (json.RawMessage, error)
	// SetSetting stores value under key; a nil value removes the key.
	SetSetting(ctx context.Context, key string, value json.RawMessage) error
}

// SettingSwapper is a SettingStore that can change a setting only if nobody changed it since it was
// read: the compare-and-swap that lets several processes change one setting (a map of pools,
// retentions, boosts) without losing each other's changes. Every pronto store implements it;
// UpdateSetting uses it.
type SettingSwapper interface {
	SettingStore
	// SwapSetting stores new under key (nil removes the key) if and only if the stored value still
	// equals old (nil: the key is absent), in one atomic step, and reports whether it did. old must
	// be what GetSetting returned: a store that keeps the bytes as written compares them byte for
	// byte, and PostgreSQL, whose jsonb normalizes the text, compares as jsonb (equal values match
	// whatever their spelling). A swap that finds another value is no error: swapped is false and
	// nothing changes.
	SwapSetting(ctx context.Context, key string, old, new json.RawMessage) (swapped bool, err error)
}

// settingSwapTries bounds UpdateSetting's attempts: each lost swap means another writer's change
// went in, so running out takes that many changes to one setting while one update runs.
const settingSwapTries = 50

// ErrSettingContended is returned, wrapped with the key, when UpdateSetting lost its swap every time.
var ErrSettingContended = errors.New("the setting kept changing under this update")

// UpdateSetting changes the setting under key by fn, which gets the stored value (nil when absent)
// and returns the value to store (nil removes the key; the same bytes as old store nothing). On a
// SettingSwapper the change applies only to the value fn saw: when another writer changed it in
// between, fn runs again on the new value, so a concurrent update is never overwritten. An update
// that loses its swap settingSwapTries times in a row (that many other changes landing while it
// runs) gives up with ErrSettingContended, its change not made: never lost silently. fn may run
// several times, so any other effect it has must bear repeating; an error from fn ends the update,
// returned as is. On a store without SwapSetting it is a plain read then write, which a concurrent
// writer can overwrite.
func UpdateSetting(ctx context.Context, ss SettingStore, key string, fn func(old json.RawMessage) (json.RawMessage, error)) error {
	sw, atomic := ss.(SettingSwapper)
	for try := 0; ; try++ {
		old, err := ss.GetSetting(ctx, key)
		if err != nil {
			return err
		}
		val, err := fn(old)
		if err != nil {
			return err
		}
		if sameSetting(old, val) {
			return nil
		}
		if !atomic {
			return ss.SetSetting(ctx, key, val)
		}
		swapped, err := sw.SwapSetting(ctx, key, old, val)
		if err != nil || swapped {
			return err
		}
		if try+1 >= settingSwapTries {
			return fmt.Errorf("update setting %s: %d tries: %w", key, settingSwapTries, ErrSettingContended)
		}
		// Back off a little, at random, once the first retries have lost too: writers that keep
		// colliding spread out.
		if try >= 2 {
			d := time.Duration(rand.Int64N(int64(time.Millisecond) << min(try-2, 5)))
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-t.C:
			}
		}
	}
}

// sameSetting reports whether storing b in place of a changes nothing.
func sameSetting(a, b json.RawMessage) bool {
	if (a == nil) != (b == nil) {
		return false
	}
	return string(a) == string(b)
}

// MaintenanceSetting is the SettingStore key that holds maintenance mode's state while the mode is
// on (ojs-admin-api.md 12.1; absent when off). Besides the fetches the server refuses, every
// client's leader reads it to hold the promotion of due jobs and the cron triggers.
const MaintenanceSetting = "maintenance"
