package dashboard

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/pronto-jobs/pronto/store/memory"
)

// heldRead is a memory store whose read of the logged-out list in a context marked heldMark waits
// (after reading; the first such read only) until release is closed, having said so on reached.
type heldRead struct {
	*memory.Store
	reached, release chan struct{}
	once             sync.Once
}

type heldMark struct{}

func (s *heldRead) GetSetting(ctx context.Context, key string) (json.RawMessage, error) {
	v, err := s.Store.GetSetting(ctx, key)
	if key == RevokedSetting && ctx.Value(heldMark{}) != nil {
		s.once.Do(func() { // the first read only: a retry reads what is stored then
			close(s.reached)
			<-s.release
		})
	}
	return v, err
}

// TestConcurrentLogoutsOnTwoServersBothStay: two servers record a logout each at once, the second
// having read the list before the first wrote it: both sessions stay logged out everywhere (the
// second write no longer puts back the list it read).
func TestConcurrentLogoutsOnTwoServersBothStay(t *testing.T) {
	st := &heldRead{Store: memory.New(), reached: make(chan struct{}), release: make(chan struct{})}
	a, b := &revocations{ss: st.Store}, &revocations{ss: st}
	until := time.Now().Add(time.Hour)
	done := make(chan error, 1)
	go func() {
		done <- b.revoke(context.WithValue(context.Background(), heldMark{}, true), "session-b", until)
	}()
	<-st.reached
	if err := a.revoke(context.Background(), "session-a", until); err != nil {
		t.Fatal(err)
	}
	close(st.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	m, err := (&revocations{ss: st.Store}).read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"session-a", "session-b"} {
		if _, ok := m[id]; !ok {
			t.Errorf("%s is no longer in the logged-out list %v", id, m)
		}
	}
}
