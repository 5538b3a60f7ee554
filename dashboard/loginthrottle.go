package dashboard

import (
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"
)

// The login throttle: an address may try loginFreeTries keys, then waits loginBaseDelay before
// its next try, twice as long after each further wrong key, up to loginMaxDelay. While wrong keys
// arrive faster than the global budget refills (loginGlobalBurst, one more every
// loginGlobalEvery), as from many addresses at once, every address gets one free try only. The
// wait of an address depends on its own wrong keys alone, so no other address can lock the
// operator out; an address is forgotten loginForget after its wait ends.
const (
	loginFreeTries   = 5
	loginBaseDelay   = time.Second
	loginMaxDelay    = 5 * time.Minute
	loginForget      = 15 * time.Minute
	loginGlobalBurst = 30
	loginGlobalEvery = 2 * time.Second
	loginMaxAddrs    = 10000 // addresses remembered at once, so a spray cannot grow the table
)

// loginThrottle counts wrong keys per client address and over all (see the constants above).
type loginThrottle struct {
	mu     sync.Mutex
	now    func() time.Time
	addrs  map[string]*loginTries
	tokens float64   // the global budget, at most loginGlobalBurst
	filled time.Time // when tokens was last topped up
}

// loginTries is one address's record: tries not known to have succeeded, the latest at last.
type loginTries struct {
	n    int
	last time.Time
}

func newLoginThrottle() *loginThrottle {
	return &loginThrottle{now: time.Now, addrs: map[string]*loginTries{}, tokens: loginGlobalBurst}
}

// delay is how long after its latest try an address with n tries waits, free the free tries.
func loginDelay(n, free int) time.Duration {
	if n < free {
		return 0
	}
	d := loginBaseDelay
	for i := free; i < n && d < loginMaxDelay; i++ {
		d *= 2
	}
	return min(d, loginMaxDelay)
}

// refill tops the global budget up to now; t.mu is held.
func (t *loginThrottle) refill(now time.Time) {
	if el := now.Sub(t.filled); el > 0 {
		t.tokens = min(loginGlobalBurst, t.tokens+float64(el)/float64(loginGlobalEvery))
	}
	t.filled = now
}

// admit says whether a login from addr may have its key checked now, else how long it must wait.
// An admitted try counts as a wrong key until succeeded says otherwise, so that concurrent tries
// from one address cannot all pass before the first is counted.
func (t *loginThrottle) admit(addr string) (wait time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	t.refill(now)
	free := loginFreeTries
	if t.tokens < 1 {
		free = 1
	}
	rec := t.addrs[addr]
	if rec != nil {
		if w := rec.last.Add(loginDelay(rec.n, free)).Sub(now); w > 0 {
			return w
		}
	} else {
		t.makeRoom(now)
		rec = &loginTries{}
		t.addrs[addr] = rec
	}
	rec.n++
	rec.last = now
	t.tokens = max(0, t.tokens-1)
	return 0
}

// succeeded forgets addr's tries: the key was right.
func (t *loginThrottle) succeeded(addr string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.addrs[addr]; ok {
		delete(t.addrs, addr)
		t.tokens = min(loginGlobalBurst, t.tokens+1)
	}
}

// makeRoom forgets the addresses past their wait by loginForget, and when the table is still full
// the one tried longest ago; t.mu is held.
func (t *loginThrottle) makeRoom(now time.Time) {
	if len(t.addrs) < loginMaxAddrs {
		return
	}
	var oldest string
	for a, rec := range t.addrs {
		if now.Sub(rec.last) > loginDelay(rec.n, 1)+loginForget {
			delete(t.addrs, a)
		} else if oldest == "" || rec.last.Before(t.addrs[oldest].last) {
			oldest = a
		}
	}
	if len(t.addrs) >= loginMaxAddrs {
		delete(t.addrs, oldest)
	}
}

// clientAddr is the address the login throttle counts r's tries under: the peer's IP, or with a
// trusted proxy (Config.TrustForwardedProto) the last X-Forwarded-For hop, the one that proxy
// added. An IPv6 address counts by its /64, which one client usually holds whole.
func (h *Handler) clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	if h.cfg.TrustForwardedProto {
		if xff := r.Header.Values("X-Forwarded-For"); len(xff) > 0 {
			hops := strings.Split(xff[len(xff)-1], ",")
			if last := strings.TrimSpace(hops[len(hops)-1]); last != "" {
				host = last
			}
		}
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	ip = ip.Unmap()
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.String()
	}
	return ip.String()
}
