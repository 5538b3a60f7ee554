package memory

import (
	"fmt"
	"slices"
	"time"

	"github.com/pronto-jobs/pronto/store"
)

// Unique keys. s.unique maps each key to the job that took it last; since a job may only take a key
// nobody holds, and a job moved into its unique states takes the key back or gives it up
// (meetHolder), that job is the only one that can hold it. Whether it does is decided when asked,
// from its state, UniqueStates and UniqueUntil, so nothing needs updating when a holder moves on.

// lapsed reports whether j's unique period has run out.
func (j *job) lapsed(now time.Time) bool {
	return !j.UniqueUntil.IsZero() && !now.Before(j.UniqueUntil)
}

// holds reports whether j holds its unique key at now.
func (j *job) holds(now time.Time) bool {
	return j.UniqueKey != "" && !j.lapsed(now) && slices.Contains(store.UniqueStatesOrDefault(j.UniqueStates), j.State)
}

// meetHolder settles the key of j, which a transition has just moved into its state, as the database
// stores' partial unique index does: if j now holds its key while another job does, j gives its key
// up (a claim, finish, promotion or rescue never fails for uniqueness); if j holds it alone, j
// becomes the key's holder (it may have taken the key while outside its states, and another job
// taken it since). s.mu must be held.
func (s *Store) meetHolder(j *job) {
	now := time.Now()
	if !j.holds(now) {
		return
	}
	h := s.holder(j.UniqueKey)
	switch {
	case h == j:
	case h != nil && h.holds(now):
		j.UniqueKey = ""
	default:
		s.unique[j.UniqueKey] = j
	}
}

// holder returns the stored job that took key last, or nil; s.mu must be held.
func (s *Store) holder(key string) *job {
	h := s.unique[key]
	if h == nil || s.jobs[h.ID] != h || h.UniqueKey != key {
		return nil
	}
	return h
}

// validUnique checks the unique fields of p.
func validUnique(p *store.InsertParams) error {
	for _, st := range p.UniqueStates {
		if !st.Valid() {
			return fmt.Errorf("memory: insert job %s: unique state %q: %w", p.ID, st, store.ErrInvalidParams)
		}
	}
	return nil
}

// uniquePlan is what a batch's unique keys make Insert do besides inserting.
type uniquePlan struct {
	// duplicates[i] is the job returned in place of params[i] when it was ignored (nil otherwise).
	duplicates []*job
	// replaced are stored jobs that a replacing job takes the key from.
	replaced []*job
	// cancelled[i] are the jobs params[i] cancels to take its key, as they were before (see
	// store.Job.Replaced); nil when none does.
	cancelled [][]*store.Job
	// lapsed are stored jobs whose period ran out; the batch takes their keys.
	lapsed []*job
}

// duplicateOf returns the job returned in place of the i-th job of the batch, or nil.
func (p uniquePlan) duplicateOf(i int) *job {
	if p.duplicates == nil {
		return nil
	}
	return p.duplicates[i]
}

// cancelledBy returns the jobs the i-th job of the batch cancels to take its key, or nil.
func (p uniquePlan) cancelledBy(i int) []*store.Job {
	if p.cancelled == nil {
		return nil
	}
	return p.cancelled[i]
}

// planUnique meets each unique job of a batch with the job holding its key, stored or earlier in the
// batch, and decides by its policy. It changes only the batch's own (unstored) jobs, so a refusal
// leaves the store as it was. s.mu must be held.
func (s *Store) planUnique(jobs []*job, params []*store.InsertParams, now time.Time) (uniquePlan, error) {
	var plan uniquePlan
	var batch map[string]*job // key -> the batch's job that took it last
	for i, j := range jobs {
		key := j.UniqueKey
		if key == "" {
			continue
		}
		h, stored := batch[key], false
		if h == nil {
			h, stored = s.holder(key), true
		}
		if h != nil && h.lapsed(now) {
			if stored {
				plan.lapsed = append(plan.lapsed, h)
			} else {
				h.UniqueKey = ""
			}
			h = nil
		}
		if h != nil && h.holds(now) {
			switch params[i].OnConflict {
			case store.ConflictIgnore:
				if plan.duplicates == nil {
					plan.duplicates = make([]*job, len(jobs))
				}
				plan.duplicates[i] = h
				continue
			case store.ConflictReplace, store.ConflictReplaceExceptSchedule:
				if params[i].OnConflict == store.ConflictReplaceExceptSchedule &&
					(h.State == store.StateScheduled || h.State == store.StateRetryable) {
					j.State, j.ScheduledAt = h.State, h.ScheduledAt
				}
				if !h.State.Terminal() { // a terminal holder only gives its key up (applyUnique)
					if plan.cancelled == nil {
						plan.cancelled = make([][]*store.Job, len(jobs))
					}
					plan.cancelled[i] = append(plan.cancelled[i], h.export())
				}
				if stored {
					plan.replaced = append(plan.replaced, h)
				} else {
					h.State, h.CompletedAt = store.StateCancelled, now
					h.giveUpHeldKey()
				}
			default:
				return uniquePlan{}, fmt.Errorf("memory: insert job %s: %w", j.ID,
					&store.UniqueConflictError{Key: key, ExistingID: h.ID, ExistingState: h.State})
			}
		}
		if batch == nil {
			batch = make(map[string]*job)
		}
		batch[key] = j
	}
	return plan, nil
}

// giveUpHeldKey clears the key of j, a job just replaced under it, when j's state is one of its
// unique states: the replacement holds the key now, and j keeping it would make a later RetryJob of
// j meet the replacement as if j still held it (PostgreSQL's sqlUniqueReplace clears it likewise).
func (j *job) giveUpHeldKey() {
	if slices.Contains(store.UniqueStatesOrDefault(j.UniqueStates), j.State) {
		j.UniqueKey = ""
	}
}

// applyUnique makes the plan's changes to stored jobs and returns the cancel notifications to
// publish. A replaced job that is not terminal is cancelled; one that is terminal (it held its key in
// a terminal state) cannot be. Either way, if it would still hold its key in its state then (a
// terminal holder always would; a cancelled one when cancelled is among its unique states), it gives
// the key up, as a lapsed one does. s.mu must be held.
func (s *Store) applyUnique(plan uniquePlan, now time.Time) []store.Notification {
	var cancels []store.Notification
	for _, h := range plan.replaced {
		if !h.State.Terminal() {
			s.cancel(h, now, &cancels)
		}
		h.giveUpHeldKey()
	}
	for _, h := range plan.lapsed {
		h.UniqueKey = ""
	}
	return cancels
}

// retake lets j, about to become available again by hand, hold its unique key again: it refuses
// with a *store.UniqueConflictError when another job holds the key meanwhile. s.mu must be held.
func (s *Store) retake(j *job, now time.Time) error {
	if j.UniqueKey == "" {
		return nil
	}
	if h := s.holder(j.UniqueKey); h != nil && h != j && h.holds(now) {
		return fmt.Errorf("memory: job %s: %w", j.ID,
			&store.UniqueConflictError{Key: j.UniqueKey, ExistingID: h.ID, ExistingState: h.State})
	}
	s.unique[j.UniqueKey] = j
	return nil
}
