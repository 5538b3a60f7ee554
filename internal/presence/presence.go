// Package presence keeps, per queue, the set of live clients working it, from their presence
// announcements, and picks which one of them claims the jobs an insert notification announces.
//
// Without it every client claims on every notification: with P processes a job announced alone
// costs P claims, P-1 of them finding nothing. Each notification of an insert carries a random
// nonce; every client ranks the live clients of the queue by a hash of (client, nonce), highest
// first (rendezvous hashing), and only the first claims. Clients agree without talking as long as
// they see the same live set; when views differ (a client just started, or stopped a moment ago)
// a job may be claimed by two clients, which is harmless, or, only while a dead client is still
// counted, by none until the next poll.
package presence

import (
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Table is one client's view of the clients working its queues. It is safe for concurrent use.
type Table struct {
	self string
	ttl  time.Duration
	// own maps each queue this client works to the fingerprint of the kinds it claims there.
	own map[string]string

	mu    sync.Mutex
	peers map[string]map[string]peer // queue -> client -> peer
}

type peer struct {
	fingerprint string
	seen        time.Time
}

// New returns the view of client self, which works the queues of own (queue to kinds fingerprint),
// and forgets a peer not announced for ttl.
func New(self string, own map[string]string, ttl time.Duration) *Table {
	return &Table{self: self, ttl: ttl, own: own, peers: make(map[string]map[string]peer)}
}

// Fingerprint identifies a set of kinds: clients whose fingerprints differ for a queue claim
// different jobs of it and cannot stand in for each other.
func Fingerprint(kinds []string) string {
	sorted := slices.Clone(kinds)
	slices.Sort(sorted)
	h := fnv.New64a()
	h.Write([]byte(strings.Join(sorted, "\x00")))
	return strconv.FormatUint(h.Sum64(), 16)
}

// Seen records that client works queue with the kinds fingerprinted by fingerprint, as of now.
// Announcements of this client itself, and of queues it does not work, are ignored.
func (t *Table) Seen(client, queue, fingerprint string, now time.Time) {
	if client == t.self {
		return
	}
	if _, ok := t.own[queue]; !ok {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	q := t.peers[queue]
	if q == nil {
		q = make(map[string]peer)
		t.peers[queue] = q
	}
	q[client] = peer{fingerprint: fingerprint, seen: now}
}

// Gone forgets client in every queue.
func (t *Table) Gone(client string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, q := range t.peers {
		delete(q, client)
	}
}

// Peers returns the number of live clients other than this one working queue, as of now.
func (t *Table) Peers(queue string, now time.Time) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.livePeers(queue, now))
}

// livePeers drops the peers of queue not announced within ttl and returns the rest; t.mu is held.
func (t *Table) livePeers(queue string, now time.Time) map[string]peer {
	q := t.peers[queue]
	for client, p := range q {
		if now.Sub(p.seen) > t.ttl {
			delete(q, client)
		}
	}
	return q
}

// Owner reports whether this client is the one to claim the jobs of an insert notification of
// queue carrying nonce, and how many live peers work queue besides it. It owns every notification
// without a nonce, every one of a queue it shares with a client claiming other kinds, and, when it
// works queue alone, all of them. It owns none of a queue it does not work.
func (t *Table) Owner(queue string, nonce uint32, now time.Time) (mine bool, peers int) {
	fp, works := t.own[queue]
	if !works {
		return false, 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	live := t.livePeers(queue, now)
	if nonce == 0 || len(live) == 0 {
		return true, len(live)
	}
	best, bestScore := t.self, score(t.self, nonce)
	for client, p := range live {
		if p.fingerprint != fp {
			return true, len(live)
		}
		if s := score(client, nonce); s > bestScore || (s == bestScore && client > best) {
			best, bestScore = client, s
		}
	}
	return best == t.self, len(live)
}

// score is the rendezvous hash of client for nonce.
func score(client string, nonce uint32) uint64 {
	h := fnv.New64a()
	h.Write([]byte(client))
	// Mix the nonce in after the client id and scramble the result (splitmix64's finalizer), so
	// that nearby nonces rank the clients independently.
	x := h.Sum64() ^ (uint64(nonce) * 0x9e3779b97f4a7c15)
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
