// Package cutproxy is a TCP proxy for tests that lose their backend: a connection cut, a host gone,
// a network partition.
package cutproxy

import (
	"net"
	"sync"
	"testing"
	"time"
)

// Proxy forwards TCP connections to a backend until it is cut: then its listener is closed (new
// connections are refused) and every connection through it is dropped, as when the backend's host
// goes away. Mend listens again on the same address. Stall holds every byte in both directions
// (a network partition: nothing refused, nothing answered) until Flow.
type Proxy struct {
	t      testing.TB
	addr   string
	target string

	mu      sync.Mutex
	flowing *sync.Cond // signalled when stalled turns false
	stalled bool
	ln      net.Listener
	conns   map[net.Conn]bool
}

// New starts a proxy to target (host:port) on a free port of 127.0.0.1; it is cut when the test
// ends.
func New(t testing.TB, target string) *Proxy {
	p := &Proxy{t: t, target: target, conns: map[net.Conn]bool{}}
	p.flowing = sync.NewCond(&p.mu)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = ln.Addr().String()
	p.serve(ln)
	t.Cleanup(p.Cut)
	return p
}

func (p *Proxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b, err := net.Dial("tcp", p.target)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			if p.ln != ln { // cut meanwhile
				p.mu.Unlock()
				_, _ = c.Close(), b.Close()
				continue
			}
			p.conns[c], p.conns[b] = true, true
			p.mu.Unlock()
			go p.pipe(b, c)
			go p.pipe(c, b)
		}
	}()
}

// pipe copies src to dst, holding what it read while the proxy is stalled.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer func() { _, _ = dst.Close(), src.Close() }()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			for p.stalled {
				p.flowing.Wait()
			}
			p.mu.Unlock()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// Stall holds every byte read, in both directions, until Flow.
func (p *Proxy) Stall() {
	p.mu.Lock()
	p.stalled = true
	p.mu.Unlock()
}

// Flow lets the bytes Stall held go on.
func (p *Proxy) Flow() {
	p.mu.Lock()
	p.stalled = false
	p.flowing.Broadcast()
	p.mu.Unlock()
}

// Cut closes the listener (new connections are refused) and drops every connection through the
// proxy.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stalled = false // let held pipes run into their closed connections
	p.flowing.Broadcast()
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		_ = c.Close()
	}
	clear(p.conns)
}

// Mend listens again on the proxy's address after Cut.
func (p *Proxy) Mend() {
	var ln net.Listener
	var err error
	// The port was ours a moment ago; another process taking it in between is not expected, but
	// a listener's close can take a moment to release it.
	for range 50 {
		if ln, err = net.Listen("tcp", p.addr); err == nil {
			p.serve(ln)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.t.Fatalf("listen again on %s: %v", p.addr, err)
}

// Addr is the proxy's address (host:port).
func (p *Proxy) Addr() string { return p.addr }
