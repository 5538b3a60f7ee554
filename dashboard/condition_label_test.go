package dashboard

import (
	"strings"
	"testing"

	"github.com/pronto-jobs/pronto/store"
)

// TestStoreConditionLabels: every condition a store names has an indicator label of its own (not
// "store error", which a busy SQLite file or a loading Redis is not), and its message, which the
// page shows after the label, starts with that label so it is not said twice.
func TestStoreConditionLabels(t *testing.T) {
	for _, c := range []store.Condition{
		store.ConditionUnreachable, store.ConditionTimeout, store.ConditionLockTimeout,
		store.ConditionStatementTimeout, store.ConditionReadOnly, store.ConditionIdleSessionTimeout,
		store.ConditionInsufficientResources, store.ConditionBusy, store.ConditionLoading,
		store.ConditionBusyScript, store.ConditionMasterDown, store.ConditionClusterDown,
		store.ConditionUnavailable,
	} {
		label := problemLabel(string(c))
		if label == "store error" {
			t.Errorf("%q: labelled %q", c, label)
		}
		switch c {
		case store.ConditionBusy, store.ConditionLoading, store.ConditionBusyScript,
			store.ConditionMasterDown, store.ConditionClusterDown:
			if !strings.HasPrefix(c.Message(), label+": ") {
				t.Errorf("%q: message %q does not start with its label %q", c, c.Message(), label)
			}
		}
	}
}
