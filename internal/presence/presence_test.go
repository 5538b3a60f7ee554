package presence

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const ttl = 3 * time.Second

var kindsFP = Fingerprint([]string{"email", "report"})

// cluster returns the tables of clients who all work queue "q" with the same kinds and have all
// heard each other at now.
func cluster(now time.Time, clients ...string) []*Table {
	tables := make([]*Table, len(clients))
	for i, self := range clients {
		tables[i] = New(self, map[string]string{"q": kindsFP}, ttl)
	}
	for _, t := range tables {
		for _, other := range clients {
			t.Seen(other, "q", kindsFP, now)
		}
	}
	return tables
}

func TestExactlyOneOwnerPerNonceAndAnEvenShare(t *testing.T) {
	now := time.Now()
	clients := []string{"host-a-1", "host-b-7", "host-c-42"}
	tables := cluster(now, clients...)
	owned := make([]int, len(tables))
	const nonces = 3000
	for nonce := uint32(1); nonce <= nonces; nonce++ {
		owners := 0
		for i, tb := range tables {
			mine, peers := tb.Owner("q", nonce, now)
			require.Equal(t, 2, peers)
			if mine {
				owners++
				owned[i]++
			}
		}
		require.Equal(t, 1, owners, "nonce %d: exactly one client claims", nonce)
	}
	for i, n := range owned {
		require.InDelta(t, nonces/3, n, nonces/10, "client %s owns about a third: %v", clients[i], owned)
	}
}

func TestAloneOrWithoutNonceOwnsEverything(t *testing.T) {
	now := time.Now()
	alone := New("solo", map[string]string{"q": kindsFP}, ttl)
	for nonce := uint32(1); nonce < 100; nonce++ {
		mine, peers := alone.Owner("q", nonce, now)
		require.True(t, mine)
		require.Zero(t, peers)
	}
	tables := cluster(now, "a", "b")
	for _, tb := range tables {
		mine, _ := tb.Owner("q", 0, now)
		require.True(t, mine, "a notification without a nonce is claimed by every client")
	}
}

func TestQueueNotWorkedIsNeverOwned(t *testing.T) {
	now := time.Now()
	tb := New("a", map[string]string{"q": kindsFP}, ttl)
	tb.Seen("b", "other", kindsFP, now)
	mine, peers := tb.Owner("other", 7, now)
	require.False(t, mine)
	require.Zero(t, peers)
}

func TestDifferentKindsMeanEveryClientClaims(t *testing.T) {
	now := time.Now()
	a := New("a", map[string]string{"q": kindsFP}, ttl)
	a.Seen("b", "q", Fingerprint([]string{"email"}), now)
	for nonce := uint32(1); nonce < 200; nonce++ {
		mine, peers := a.Owner("q", nonce, now)
		require.True(t, mine, "a peer claiming other kinds cannot stand in for this client")
		require.Equal(t, 1, peers)
	}
	require.Equal(t, Fingerprint([]string{"b", "a"}), Fingerprint([]string{"a", "b"}), "order does not matter")
	require.NotEqual(t, Fingerprint([]string{"ab"}), Fingerprint([]string{"a", "b"}))
}

func TestSilentPeersExpireAndGonePeersLeaveAtOnce(t *testing.T) {
	now := time.Now()
	tables := cluster(now, "a", "b", "c")
	a := tables[0]
	require.Equal(t, 2, a.Peers("q", now))
	a.Gone("b")
	require.Equal(t, 1, a.Peers("q", now), "a gone client is forgotten at once")
	require.Equal(t, 1, a.Peers("q", now.Add(ttl)), "a peer counts until its announcement is ttl old")
	require.Zero(t, a.Peers("q", now.Add(ttl+time.Millisecond)), "then it is forgotten")
	for nonce := uint32(1); nonce < 100; nonce++ {
		mine, _ := a.Owner("q", nonce, now.Add(ttl+time.Millisecond))
		require.True(t, mine, "alone again, the client claims everything")
	}
	a.Seen("a", "q", kindsFP, now)
	require.Zero(t, a.Peers("q", now), "a client's own announcements are not peers")
}

// TestViewsThatDifferStillLeaveAnOwner: while a new client is known to some tables only, every
// nonce is still owned by at least one client (the highest-ranked of the true live set sees itself
// first in its own view).
func TestViewsThatDifferStillLeaveAnOwner(t *testing.T) {
	now := time.Now()
	tables := cluster(now, "a", "b", "c")
	// d started a moment ago: it has heard everyone, but of the others only a has heard it.
	d := New("d", map[string]string{"q": kindsFP}, ttl)
	for _, other := range []string{"a", "b", "c"} {
		d.Seen(other, "q", kindsFP, now)
	}
	tables[0].Seen("d", "q", kindsFP, now)
	all := append(tables, d)
	for nonce := uint32(1); nonce <= 2000; nonce++ {
		owners := 0
		for _, tb := range all {
			if mine, _ := tb.Owner("q", nonce, now); mine {
				owners++
			}
		}
		require.GreaterOrEqual(t, owners, 1, fmt.Sprintf("nonce %d has no owner", nonce))
	}
}
