package redis

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/pronto-jobs/pronto/store"
)

// Rate limits on a Redis Cluster. A key's limit spans queues, so slots, and no queue script can
// read it there. The limit lives instead in the key's own slot (rateBase), beside a ledger of the
// key's active jobs, and a claim that meets a limited job works in three steps:
//
//  1. The claim script stops at the first job whose key it holds no permits of, and names the keys
//     of the queue's limited jobs with how many of each it could take (needpermits).
//  2. RateAcquire takes up to that many permits of each key, as a reservation that counts against
//     max_active and the rate window at once, so two claims on different queues never overrun it.
//  3. The claim runs again with the permits (the jobs before the stop are kept: claim order holds),
//     and RateConfirm turns the used permits into ledger entries and gives the others back.
//
// The store remembers, per queue, the keys its last claim used permits of (rememberNeeds), and the
// next claim takes those permits before its first call. A claim that uses up every permit it asked
// for, with jobs of the key left, stops and asks again (wants in claimBody), so one claim's permits
// of a key may span reservations, each confirmed for its share.
//
// A job's permit comes back when Finish applies its outcome (RateRelease). A job that leaves active
// some other way (rescued, cancelled or deleted while running, or finished by a process that died
// before its release) keeps its entry until RateReconcile finds that job no longer active in that
// attempt: Rescue looks at the entries whose lease has passed on each pass, and a claim that finds
// a key full looks at all of its entries, at most once per reconcileEvery per key.
//
// A tenant's limit (store.TenantLimitKey) is kept the same way. The claim is told which tenants have
// a stored limit (limitedTenants), and a limited tenant's turn in the fair rotation takes one of its
// permits per job, or stops the claim to ask for them; so does a job of a limited tenant with a rate
// key, which takes a permit of both limits (permitKeys). A job claimed under a tenant permit carries
// tlp, so that its outcome gives it back.
//
// What a cluster gives, against a single node (docs/redis.md, "Redis Cluster"): max_active and
// the rate window hold across queues and processes as they do there; a limit's exhaustion is only
// acted on (drop, reschedule) when the confirmed jobs and window alone exhaust it, never for permits
// another claim holds for a moment; jobs of a key without a stored limit are not in the ledger, so
// a limit stored while some of them run counts only the jobs claimed after it; a permit of a job
// that left active other than through Finish returns within a rescue pass after its lease end, or
// within reconcileEvery of a claim finding the key full; a tenant limit stored by another process
// applies to this one's claims within tenantLimitsEvery.

// reconcileEvery bounds how often one store checks every ledger entry of a full key.
const reconcileEvery = time.Second

// maxClaimRounds bounds the claim calls of one Claim on a cluster: a claim stops at most once per
// rate key it meets, and a key that appears between two calls is left to the next Claim.
const maxClaimRounds = 4

// rateBase returns the key prefix of rate key rk's limit and ledger on a Redis Cluster (KEYS[1] of
// the Rate scripts): tagged by the key, as a queue's keys are by the queue.
func (s *Store) rateBase(rk string) string {
	tag := "r:" + rk
	if strings.ContainsAny(rk, "{}") {
		tag = "rh:" + hex.EncodeToString([]byte(rk))
	}
	return s.prefix + "{" + tag + "}:"
}

// rateKeysKey is the sorted set of the keys with a stored limit, for listing in key order.
func (s *Store) rateKeysKey() string { return s.prefix + "rlkeys" }

// permits is what one claim holds of one rate key's limit on a cluster: the reservations it took
// (usually one; another when it used up the first and asked again).
type permits struct {
	key       string
	res       []reservation
	unlimited bool   // the key has no stored limit: nothing was taken, nothing to confirm
	left      int    // permits not used yet
	more      bool   // the last reservation got all it asked for: more may be free
	action    string // the limit's on_limit once they are used up and the key is exhausted, "" to wait
	until     int64  // end of the window that exhausts the key, µs, 0 for none
	full      bool   // the key's confirmed active jobs reach max_active
	used      []any  // lease end, "<id>\n<attempt>" of each job that used one
	// The limit, and its use once the last reservation was taken (for a store.LimitHit); spent,
	// that reservation exhausted the limit (no more permits until a job finishes or the window ends).
	max, rate     int
	active, count int64
	spent         bool
}

// reservation is one RateAcquire's permits.
type reservation struct {
	id      string
	granted int
	window  string // start of the rate window they were counted in, "0" for none
}

// merge adds the permits of a later RateAcquire of the same key to p.
func (p *permits) merge(q *permits) {
	p.unlimited = p.unlimited || q.unlimited
	p.res = append(p.res, q.res...)
	p.left += q.left
	p.more, p.action, p.until, p.full = q.more, q.action, q.until, q.full
	p.max, p.rate, p.active, p.count, p.spent = q.max, q.rate, q.active, q.count, q.spent
}

// hit describes the exhausted limit of the permits' key (store.NewLimitHit), as the last
// reservation found it.
func (p *permits) hit() store.LimitHit {
	l := store.RateLimit{MaxActive: p.max, Rate: p.rate}
	if p.rate > 0 {
		l.Period = time.Microsecond // a window: its length does not matter here
	}
	return store.NewLimitHit(p.key, l, p.active, p.count)
}

// grantJSON is the form the claim script reads (see claimBody's grants).
type grantJSON struct {
	N int    `json:"n"`
	A string `json:"a"`
	U int64  `json:"u"`
	M bool   `json:"m,omitempty"`
	X bool   `json:"x,omitempty"` // spent: used up, the limit has no room (see permits.spent)
}

// ledgerEntry names a job's run in a key's ledger: its id and attempt.
func ledgerEntry(id string, attempt int) string { return id + "\n" + strconv.Itoa(attempt) }

// flagJSON is the JSON of the claim script's flag on a cluster (see claimBody's grants).
type flagJSON struct {
	G map[string]grantJSON `json:"g,omitempty"`
	T []string             `json:"t,omitempty"`
}

// claimFlag is the claim script's flag argument on a cluster: "0", then the permits held and the
// tenants with a stored limit, as JSON.
func claimFlag(held map[string]*permits, tenants []string, limit int) (string, error) {
	if len(held) == 0 && len(tenants) == 0 {
		return "0", nil
	}
	f := flagJSON{T: tenants}
	if len(held) > 0 {
		f.G = make(map[string]grantJSON, len(held))
	}
	for k, p := range held {
		n, more := p.left, p.more
		if p.unlimited {
			n, more = limit, false // no limit: as many as the claim takes
		}
		f.G[k] = grantJSON{N: n, A: p.action, U: p.until, M: more, X: p.spent && !p.unlimited}
	}
	b, err := json.Marshal(f)
	if err != nil {
		return "", err
	}
	return "0" + string(b), nil
}

// permitKeys returns the keys whose permits job j may have taken in a claim on a cluster: its rate
// key, and its tenant's limit key (a job with both takes a permit of each when its tenant is
// limited; a rate key spelled as the tenant's limit key is one limit, one permit). A key counts
// only where the claim held permits of it (see claimCluster).
func permitKeys(j *store.Job) (rate, tenant string) {
	if j.Tenant != "" && store.TenantLimitKey(j.Tenant) != j.RateKey {
		tenant = store.TenantLimitKey(j.Tenant)
	}
	return j.RateKey, tenant
}

// tenantLimitsEvery bounds how stale this store's list of the tenants with a stored limit may be:
// a tenant limit stored by another process applies to this one's claims within it.
const tenantLimitsEvery = time.Second

// limitedTenants returns the tenants with a stored limit, read from the list of limited keys at
// most once per tenantLimitsEvery (and at once after this store set or deleted a tenant limit).
func (s *Store) limitedTenants(ctx context.Context) ([]string, error) {
	s.tenantLimitsMu.Lock()
	defer s.tenantLimitsMu.Unlock()
	if !s.tenantLimitsAt.IsZero() && time.Since(s.tenantLimitsAt) < tenantLimitsEvery {
		return s.tenantLimits, nil
	}
	// The keys from "tenant:" up to "tenant;" (';' follows ':'), in the list's lexical order.
	prefix := store.TenantLimitKey("")
	upper := strings.TrimSuffix(prefix, ":") + ";"
	keys, err := s.rdb.ZRangeByLex(ctx, s.rateKeysKey(), &goredis.ZRangeBy{Min: "[" + prefix, Max: "(" + upper}).Result()
	if err != nil {
		return nil, err
	}
	// A new slice: claims running may still hold the last one.
	tenants := make([]string, len(keys))
	for i, k := range keys {
		tenants[i] = strings.TrimPrefix(k, prefix)
	}
	s.tenantLimits, s.tenantLimitsAt = tenants, time.Now()
	return tenants, nil
}

// forgetTenantLimits makes the next claim read the limited tenants again.
func (s *Store) forgetTenantLimits() {
	s.tenantLimitsMu.Lock()
	s.tenantLimitsAt = time.Time{}
	s.tenantLimitsMu.Unlock()
}

// claimCluster claims on a Redis Cluster: the claim script, then, when it stopped for want of
// permits, RateAcquire for the keys it named and the script again for the slots left, and at the
// end RateConfirm for every key it took permits of (see the top of this file).
func (s *Store) claimCluster(ctx context.Context, p store.ClaimParams) ([]*store.Job, error) {
	tenants, err := s.limitedTenants(ctx)
	if err != nil {
		return nil, fmt.Errorf("redis: claim from %s: tenant limits: %w", p.Queue, err)
	}
	limited := make(map[string]bool, len(tenants))
	for _, tn := range tenants {
		limited[tn] = true
	}
	held := map[string]*permits{}
	var out []*store.Job
	var hits []store.LimitHit
	var failed error
	// The keys this queue's last claim took permits of are asked first, for as many jobs as it took
	// or could take then (see rememberNeeds); that spares the claim call that would stop for them.
	// A claim that uses them up asks again (see wants in claimBody).
	if known := s.knownNeeds(p.Queue, p.Limit); len(known) > 0 {
		got, err := s.acquire(ctx, known, p.LeaseDuration, p.OnLimited != nil)
		for _, pm := range got {
			held[pm.key] = pm
		}
		failed = err
	}
	var named []need
	for round := 0; failed == nil && round < maxClaimRounds && p.Limit > 0; round++ {
		flag, err := claimFlag(held, tenants, p.Limit)
		if err != nil {
			failed = err
			break
		}
		jobs, need, lim, err := s.claimOnce(ctx, p, flag, nil)
		for _, h := range lim {
			hits = store.AddLimitHit(hits, h)
		}
		if err != nil {
			failed = err
			break
		}
		out = append(out, jobs...)
		for _, j := range jobs {
			rk, tk := permitKeys(j)
			for _, k := range [2]string{rk, tk} {
				// A tenant's permit is taken only for a tenant the claim knows as limited.
				if pm := held[k]; k != "" && pm != nil && (k == rk || limited[j.Tenant]) {
					pm.left--
					pm.used = append(pm.used, micros(j.LeaseExpiresAt), ledgerEntry(j.ID, j.Attempt))
				}
			}
		}
		p.Limit -= len(jobs)
		if len(p.WorkerIDs) > 0 {
			p.WorkerIDs = p.WorkerIDs[len(jobs):]
		}
		if len(need) == 0 || p.Limit <= 0 {
			break
		}
		named = append(named, need...)
		got, err := s.acquire(ctx, need, p.LeaseDuration, p.OnLimited != nil)
		for _, pm := range got {
			if h := held[pm.key]; h != nil {
				h.merge(pm)
			} else {
				held[pm.key] = pm
			}
		}
		if err != nil {
			failed = err
			break
		}
	}
	s.rememberNeeds(p.Queue, held, named)
	// Confirmed even when the claim's context ends: the jobs claimed are active, and their permits
	// must move from the reservation to the ledger.
	if err := s.confirm(context.WithoutCancel(ctx), held); err != nil && failed == nil {
		// The jobs are claimed: they run. Their permits stay reserved until the reservation
		// expires (a lease from now), so the key is never overrun meanwhile.
		s.logf("redis: claim from %s: confirming rate-limit permits: %v", p.Queue, err)
	}
	// The keys the claim found without permits: their limit and use as the permits found them.
	for i, h := range hits {
		if pm := held[h.Key]; pm != nil && !pm.unlimited && !h.HasRoom {
			hits[i] = pm.hit()
		}
	}
	p.ReportLimited(hits)
	if failed != nil && len(out) == 0 {
		return nil, fmt.Errorf("redis: claim from %s: %w", p.Queue, failed)
	}
	if failed != nil {
		s.logf("redis: claim from %s: a further claim for rate-limited jobs failed: %v", p.Queue, failed)
	}
	return out, nil
}

// need is a rate key a claim stopped at, with how many of its jobs it could take.
type need struct {
	key string
	n   int
}

// knownNeeds returns the keys queue's last claim took permits of, each for at most limit jobs.
func (s *Store) knownNeeds(queue string, limit int) []need {
	s.needsMu.Lock()
	defer s.needsMu.Unlock()
	known := s.needs[queue]
	if len(known) == 0 {
		return nil
	}
	out := make([]need, len(known))
	for i, nd := range known {
		out[i] = need{key: nd.key, n: min(nd.n, limit)}
	}
	return out
}

// rememberNeeds keeps, for queue's next claim, the keys this claim used permits of or stopped for,
// each with the most jobs it took or could take; a key asked for beforehand and not used is
// forgotten (the queue may have no job of it left).
func (s *Store) rememberNeeds(queue string, held map[string]*permits, named []need) {
	counts := map[string]int{}
	for k, pm := range held {
		if len(pm.used) > 0 {
			counts[k] = len(pm.used) / 2 // lease end, entry pairs
		}
	}
	for _, nd := range named {
		counts[nd.key] = max(counts[nd.key], nd.n)
	}
	keep := make([]need, 0, len(counts))
	for k, n := range counts {
		keep = append(keep, need{key: k, n: max(n, 1)})
	}
	s.needsMu.Lock()
	defer s.needsMu.Unlock()
	if len(keep) == 0 {
		delete(s.needs, queue)
		return
	}
	if s.needs == nil || len(s.needs) > 4096 {
		s.needs = map[string][]need{}
	}
	s.needs[queue] = keep
}

// parseNeed reads the claim script's trailing {"\nneed", key, count, ...} entry.
func parseNeed(v []any) []need {
	var out []need
	for i := 1; i+1 < len(v); i += 2 {
		k, _ := v[i].(string)
		n, _ := strconv.Atoi(fmt.Sprint(v[i+1]))
		out = append(out, need{key: k, n: max(n, 1)})
	}
	return out
}

// acquire takes permits of the keys needed, all in one pipeline. A key whose confirmed jobs fill
// max_active has its ledger checked (at most once per reconcileEvery), and is asked again when that
// freed some. With use, the permits carry the keys' use (see acquireOnce).
func (s *Store) acquire(ctx context.Context, needs []need, lease time.Duration, use bool) ([]*permits, error) {
	got, err := s.acquireOnce(ctx, needs, lease, use)
	if err != nil {
		return got, err
	}
	var again []need
	for i, pm := range got {
		if !pm.full || !s.reconcileDue(pm.key) {
			continue
		}
		freed, err := s.reconcile(ctx, pm.key)
		if err != nil {
			s.logf("redis: rate key %s: checking its active jobs: %v", pm.key, err)
			continue
		}
		if freed > 0 {
			again = append(again, needs[i])
		}
	}
	if len(again) == 0 {
		return got, nil
	}
	more, err := s.acquireOnce(ctx, again, lease, use)
	for _, m := range more {
		for i, pm := range got {
			if pm.key == m.key {
				// The first reservation goes back unused.
				if err := s.confirm(ctx, map[string]*permits{pm.key: pm}); err != nil {
					s.logf("redis: rate key %s: returning permits: %v", pm.key, err)
				}
				got[i] = m
			}
		}
	}
	return got, err
}

// acquireOnce runs RateAcquire for each need; with use, the keys' use is read too (for
// permits.hit, needed only by a claim that reports limited keys).
func (s *Store) acquireOnce(ctx context.Context, needs []need, lease time.Duration, use bool) ([]*permits, error) {
	flag := ""
	if use {
		flag = "l"
	}
	cmds := make([]*goredis.Cmd, len(needs))
	res := tokens(len(needs))
	err := s.pipelined(ctx, func(pl goredis.Pipeliner, run runScript) error {
		for i, nd := range needs {
			cmds[i] = run(scriptRateAcquire, []string{s.rateBase(nd.key)}, nd.n, res[i], lease.Microseconds(), flag)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("rate-limit permits: %w", err)
	}
	var out []*permits
	for i, c := range cmds {
		v, err := c.Slice()
		if err != nil || len(v) != 10 {
			return out, fmt.Errorf("rate-limit permits of %s: %v (reply %v)", needs[i].key, err, v)
		}
		n, _ := v[0].(int64)
		full, _ := v[4].(int64)
		until, _ := strconv.ParseInt(fmt.Sprint(v[3]), 10, 64)
		pm := &permits{key: needs[i].key, unlimited: n < 0, left: max(int(n), 0), more: int(n) >= needs[i].n,
			action: fmt.Sprint(v[2]), until: until, full: full == 1}
		if n >= 0 {
			pm.res = []reservation{{id: res[i], granted: int(n), window: fmt.Sprint(v[1])}}
		}
		spent, _ := v[9].(int64)
		pm.spent = spent == 1
		pm.max, _ = strconv.Atoi(fmt.Sprint(v[5]))
		pm.rate, _ = strconv.Atoi(fmt.Sprint(v[6]))
		pm.active, _ = strconv.ParseInt(fmt.Sprint(v[7]), 10, 64)
		pm.count, _ = strconv.ParseInt(fmt.Sprint(v[8]), 10, 64)
		if pm.action == string(store.LimitWait) {
			pm.action = ""
		}
		out = append(out, pm)
	}
	return out, nil
}

// confirm ends the reservations held: each key's used permits join its ledger, the rest go back.
func (s *Store) confirm(ctx context.Context, held map[string]*permits) error {
	return s.pipelinedScripts(ctx, func(run runScript) {
		for _, pm := range held {
			// The jobs that used permits are counted against the reservations in the order taken.
			used := pm.used
			for _, r := range pm.res {
				k := min(r.granted*2, len(used))
				run(scriptRateConfirm, []string{s.rateBase(pm.key)}, append([]any{r.id, r.granted, r.window}, used[:k]...)...)
				used = used[k:]
			}
		}
	})
}

// releasePermits gives back the permits of runs that left active through Finish: entries by rate key.
func (s *Store) releasePermits(ctx context.Context, entries map[string][]any) error {
	if len(entries) == 0 {
		return nil
	}
	return s.pipelinedScripts(ctx, func(run runScript) {
		for k, e := range entries {
			run(scriptRateRelease, []string{s.rateBase(k)}, e...)
		}
	})
}

// reconcileDue reports whether this store may check key's whole ledger now (once per
// reconcileEvery), and notes that it does.
func (s *Store) reconcileDue(key string) bool {
	s.reconciledMu.Lock()
	defer s.reconciledMu.Unlock()
	if s.reconciled == nil {
		s.reconciled = map[string]time.Time{}
	}
	if last, ok := s.reconciled[key]; ok && time.Since(last) < reconcileEvery {
		return false
	}
	if len(s.reconciled) > 4096 {
		clear(s.reconciled)
	}
	s.reconciled[key] = time.Now()
	return true
}

// reconcile checks key's ledger entries (up to 1000, the oldest lease ends first) against their
// jobs (see checkEntries) and returns how many it dropped.
func (s *Store) reconcile(ctx context.Context, key string) (int, error) {
	entries, err := s.rdb.ZRangeByScoreWithScores(ctx, s.rateBase(key)+"act", &goredis.ZRangeBy{Min: "-inf", Max: "+inf", Count: 1000}).Result()
	if err != nil {
		return 0, err
	}
	return s.checkEntries(ctx, key, entries)
}

// checkEntries reads the jobs of key's ledger entries (as read, with their lease ends), drops the
// entries of runs no longer active and updates the lease ends of the others; it returns how many it
// dropped.
func (s *Store) checkEntries(ctx context.Context, key string, entries []goredis.Z) (int, error) {
	if len(entries) == 0 {
		return 0, nil
	}
	ids := make([]string, len(entries))
	for i, e := range entries {
		m, _ := e.Member.(string)
		ids[i], _, _ = strings.Cut(m, "\n")
	}
	queues, err := s.queuesOf(ctx, ids)
	if err != nil {
		return 0, err
	}
	cmds := make([]*goredis.SliceCmd, len(entries))
	_, err = s.rdb.Pipelined(ctx, func(pl goredis.Pipeliner) error {
		for i := range entries {
			if queues[i] != "" {
				cmds[i] = pl.HMGet(ctx, s.jobKey(queues[i], ids[i]), "state", "attempt", "lease")
			}
		}
		return nil
	})
	if err != nil && !isRedisError(err) {
		return 0, err
	}
	args := make([]any, 0, 3*len(entries))
	for i, e := range entries {
		m, _ := e.Member.(string)
		_, attempt, _ := strings.Cut(m, "\n")
		lease := "0"
		if cmds[i] != nil {
			if v, err := cmds[i].Result(); err == nil && len(v) == 3 && v[0] == "active" && v[1] == attempt {
				if l, _ := v[2].(string); l != "" && l != "0" {
					lease = l
				}
			}
		}
		args = append(args, m, strconv.FormatFloat(e.Score, 'f', -1, 64), lease)
	}
	return scriptRateReconcile.Run(ctx, s.rdb, []string{s.rateBase(key)}, args...).Int()
}

// reconcileLapsed checks the ledger entries whose lease end has passed, of every key with a stored
// limit (Rescue's pass on a cluster: a rescued job's permit comes back with it). The entries of all
// keys are read in one pipeline; only keys with lapsed entries cost more.
func (s *Store) reconcileLapsed(ctx context.Context) error {
	keys, err := s.rdb.ZRange(ctx, s.rateKeysKey(), 0, -1).Result()
	if err != nil || len(keys) == 0 {
		return err
	}
	t, err := s.rdb.Time(ctx).Result()
	if err != nil {
		return err
	}
	before := "(" + strconv.FormatInt(t.UnixMicro(), 10)
	cmds := make([]*goredis.ZSliceCmd, len(keys))
	_, err = s.rdb.Pipelined(ctx, func(pl goredis.Pipeliner) error {
		for i, k := range keys {
			cmds[i] = pl.ZRangeByScoreWithScores(ctx, s.rateBase(k)+"act", &goredis.ZRangeBy{Min: "-inf", Max: before, Count: 1000})
		}
		return nil
	})
	if err != nil && !isRedisError(err) {
		return err
	}
	var errs []error
	for i, k := range keys {
		entries, err := cmds[i].Result()
		if err == nil {
			_, err = s.checkEntries(ctx, k, entries)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("rate key %s: %w", k, err))
		}
	}
	return errors.Join(errs...)
}

// setLimitCluster stores a limit in its key's slot, then lists the key.
func (s *Store) setLimitCluster(ctx context.Context, key string, l store.RateLimit) error {
	if err := scriptRateSetLimit.Run(ctx, s.rdb, []string{s.rateBase(key)}, encodeLimit(l)).Err(); err != nil && !errors.Is(err, goredis.Nil) {
		return err
	}
	defer s.forgetTenantLimits()
	return s.rdb.ZAdd(ctx, s.rateKeysKey(), goredis.Z{Member: key}).Err()
}

// deleteLimitCluster unlists a key, then removes its limit; false when it had none.
func (s *Store) deleteLimitCluster(ctx context.Context, key string) (bool, error) {
	if err := s.rdb.ZRem(ctx, s.rateKeysKey(), key).Err(); err != nil {
		return false, err
	}
	s.forgetTenantLimits()
	n, err := scriptRateDeleteLimit.Run(ctx, s.rdb, []string{s.rateBase(key)}).Int()
	return n == 1, err
}

// limitInfosCluster reads the limits of keys from their slots and sums their jobs' counts over
// the registered queues (each queue keeps its own, see ratekeys in scripts.go). A tenant's limit key
// counts the tenant's jobs (each queue's B tc:<tenant>, see tenantkeys), as on a single node: its
// active and available ones.
func (s *Store) limitInfosCluster(ctx context.Context, keys []string) ([]*store.RateLimitInfo, error) {
	qs, err := s.queues(ctx)
	if err != nil {
		return nil, err
	}
	now := strconv.FormatInt(time.Now().UnixMicro(), 10)
	lims := make([]*goredis.Cmd, len(keys))
	type counts struct{ n, due []*goredis.Cmd }
	per := make([]counts, len(keys))
	err = s.pipelined(ctx, func(pl goredis.Pipeliner, run runScript) error {
		for i, k := range keys {
			lims[i] = run(scriptRateLimitInfo, []string{s.rateBase(k)})
			tenant, byTenant := store.TenantOfLimitKey(k)
			for _, q := range qs {
				if byTenant {
					per[i].n = append(per[i].n, pl.Do(ctx, "hmget", s.qkey(q)+"tc:"+tenant, "n:active", "n:available"))
					continue
				}
				per[i].n = append(per[i].n, pl.Do(ctx, "hmget", s.qkey(q)+"rn:"+k, "n:active", "n:available"))
				per[i].due = append(per[i].due, pl.Do(ctx, "zcount", s.qkey(q)+"rs:"+k, "-inf", now))
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var out []*store.RateLimitInfo
	for i, k := range keys {
		f, err := lims[i].StringSlice()
		if err != nil {
			return nil, fmt.Errorf("rate key %s: %w", k, err)
		}
		if len(f) != 7 || f[0] != "1" {
			continue
		}
		n := func(s string) int64 { v, _ := strconv.ParseInt(s, 10, 64); return v }
		info := &store.RateLimitInfo{
			Key: k,
			Limit: store.RateLimit{MaxActive: int(n(f[1])), Rate: int(n(f[2])), Period: time.Duration(n(f[3])) * time.Microsecond,
				OnLimit: store.LimitAction(f[4])},
		}
		if ws := n(f[5]); ws > 0 {
			info.WindowStart, info.WindowCount = time.UnixMicro(ws).UTC(), n(f[6])
		}
		for j := range qs {
			if v, err := per[i].n[j].Slice(); err == nil && len(v) == 2 {
				info.Active += n(fmt.Sprint(v[0]))
				info.Waiting += n(fmt.Sprint(v[1]))
			}
			if j >= len(per[i].due) {
				continue // a tenant's limit key: no due count
			}
			if d, err := per[i].due[j].Int64(); err == nil {
				info.Waiting += d
			}
		}
		out = append(out, info)
	}
	return out, nil
}

// nextDueCluster is NextDue on a cluster: the queue's earliest due job, or the end of the window
// of a rate key that holds the queue's available jobs back, when sooner.
func (s *Store) nextDueCluster(ctx context.Context, queue string) (time.Time, bool, error) {
	v, err := scriptNextDue.Run(ctx, s.rdb, s.keys(queue), "c").StringSlice()
	if err != nil {
		return time.Time{}, false, err
	}
	var best int64
	if len(v) > 0 && v[0] != "" {
		best, _ = strconv.ParseInt(v[0], 10, 64)
	}
	if len(v) > 1 {
		infos, err := s.limitInfosWindows(ctx, v[1:])
		if err != nil {
			return time.Time{}, false, err
		}
		for _, end := range infos {
			if end > 0 && (best == 0 || end < best) {
				best = end
			}
		}
	}
	if best == 0 {
		return time.Time{}, false, nil
	}
	return time.UnixMicro(best).UTC(), true, nil
}

// limitInfosWindows returns, per key, the end (µs) of its open rate window when the window is spent,
// else 0.
func (s *Store) limitInfosWindows(ctx context.Context, keys []string) ([]int64, error) {
	cmds := make([]*goredis.Cmd, len(keys))
	err := s.pipelined(ctx, func(pl goredis.Pipeliner, run runScript) error {
		for i, k := range keys {
			cmds[i] = run(scriptRateLimitInfo, []string{s.rateBase(k)})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]int64, len(keys))
	for i, c := range cmds {
		f, err := c.StringSlice()
		if err != nil || len(f) != 7 || f[0] != "1" {
			continue
		}
		rate, _ := strconv.ParseInt(f[2], 10, 64)
		per, _ := strconv.ParseInt(f[3], 10, 64)
		ws, _ := strconv.ParseInt(f[5], 10, 64)
		wc, _ := strconv.ParseInt(f[6], 10, 64)
		if rate > 0 && per > 0 && ws > 0 && wc >= rate {
			out[i] = ws + per
		}
	}
	return out, nil
}

// insertLimits stores, on a cluster, the limits jobs being inserted bring (the last one given for a
// key wins, as on a single node).
func (s *Store) insertLimits(ctx context.Context, params []*store.InsertParams) error {
	if !s.cluster() {
		return nil
	}
	limits := map[string]store.RateLimit{}
	var order []string
	for _, p := range params {
		if p.RateLimit == nil {
			continue
		}
		if _, ok := limits[p.RateKey]; !ok {
			order = append(order, p.RateKey)
		}
		limits[p.RateKey] = *p.RateLimit
	}
	for _, k := range order {
		if err := s.setLimitCluster(ctx, k, limits[k]); err != nil {
			return fmt.Errorf("rate key %s: %w", k, err)
		}
	}
	return nil
}
