package redis

import (
	"errors"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/pronto-jobs/pronto/store"
)

// conditionPrefixes name the error replies of a server that cannot serve now for a reason an
// operator acts on differently: wait for the load, kill the script, mend the replica's link or
// the cluster (store.ConditionClassifier). READONLY and OOM are named by store.ConditionOf itself.
// The space keeps BUSYKEY and BUSYGROUP, the request's own errors, out.
var conditionPrefixes = []struct {
	prefix string
	cond   store.Condition
}{
	{"LOADING ", store.ConditionLoading},
	{"BUSY ", store.ConditionBusyScript},
	{"MASTERDOWN ", store.ConditionMasterDown},
	{"CLUSTERDOWN ", store.ConditionClusterDown},
}

// Condition names Redis's LOADING, BUSY, MASTERDOWN and CLUSTERDOWN replies (store.ConditionClassifier);
// any other error is left to store.ConditionOf.
func (s *Store) Condition(err error) store.Condition {
	var re goredis.Error
	if !errors.As(err, &re) {
		return store.ConditionNone
	}
	msg := re.Error()
	for _, p := range conditionPrefixes {
		if strings.HasPrefix(msg, p.prefix) {
			return p.cond
		}
	}
	return store.ConditionNone
}
