package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/pronto-jobs/pronto/store"
	"github.com/pronto-jobs/pronto/store/memory"
)

// busySettings is a memory store on which, between every read and swap of UpdateSetting, one other
// writer's change lands: what 50 or more writers changing one setting together do (each lost swap
// is another writer's success).
type busySettings struct {
	*memory.Store
	n int
}

func (b *busySettings) SwapSetting(ctx context.Context, key string, old, new json.RawMessage) (bool, error) {
	b.n++
	if err := b.Store.SetSetting(ctx, key, json.RawMessage(fmt.Sprintf(`{"other%d":true}`, b.n))); err != nil {
		return false, err
	}
	return b.Store.SwapSetting(ctx, key, old, new)
}

// TestUpdateSettingContendedFailsLoudly: an update that loses every swap (another writer's change
// landing between each read and swap) fails with ErrSettingContended naming the key, its change not
// made and no other writer's change overwritten.
func TestUpdateSettingContendedFailsLoudly(t *testing.T) {
	ss := &busySettings{Store: memory.New()}
	err := store.UpdateSetting(context.Background(), ss, "pools", func(old json.RawMessage) (json.RawMessage, error) {
		return json.RawMessage(`{"mine":true}`), nil
	})
	if !errors.Is(err, store.ErrSettingContended) || !strings.Contains(err.Error(), "pools") {
		t.Fatalf("an update that lost all its %d swaps: %v, want ErrSettingContended naming the key", ss.n, err)
	}
	v, err := ss.Store.GetSetting(context.Background(), "pools")
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf(`{"other%d":true}`, ss.n); string(v) != want {
		t.Fatalf("stored %s, want the last other writer's %s", v, want)
	}
}
