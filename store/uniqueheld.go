package store

import "context"

// UniqueKeyRef names a unique key as Insert would meet it: the key, and the queue of the job that
// would be inserted with it (on stores that hold keys per queue, such as Redis, the queue matters;
// the others ignore it).
type UniqueKeyRef struct {
	Queue string
	Key   string
}

// UniqueHolder is implemented by a store that can say, before an insert, which unique keys are held
// now. The client asks it only when an insert is about to be refused by a bound (a queue's maximum
// depth, a tenant's enqueue limits): a job whose key is held stores nothing under the ignore and
// reject policies, so it takes no room and must not be refused for room it would not take.
type UniqueHolder interface {
	// HeldUniqueKeys returns, for each of refs held now, the id of the job holding it: a job with
	// that UniqueKey (in that queue, on a store whose keys are per queue) in one of its own
	// UniqueStates and before its UniqueUntil, exactly the job an Insert at this instant would meet.
	// Keys not held are absent from the map. One round trip (per queue slot on a cluster) whatever
	// the number of refs; an empty refs costs nothing.
	HeldUniqueKeys(ctx context.Context, refs []UniqueKeyRef) (map[UniqueKeyRef]string, error)
}

// UniqueRefKeys returns the keys of refs, in order, for a store whose keys are held store-wide (the
// queue of a ref does not matter to it).
func UniqueRefKeys(refs []UniqueKeyRef) []string {
	keys := make([]string, len(refs))
	for i, r := range refs {
		keys[i] = r.Key
	}
	return keys
}

// HoldersByRef answers HeldUniqueKeys from holders, the holding job of each held key, for a store
// whose keys are held store-wide: every ref whose key is held maps to its holder.
func HoldersByRef(refs []UniqueKeyRef, holders map[string]string) map[UniqueKeyRef]string {
	out := make(map[UniqueKeyRef]string, len(holders))
	for _, r := range refs {
		if id, ok := holders[r.Key]; ok {
			out[r] = id
		}
	}
	return out
}
