package server

import "sync"

// poolRooms keeps a pool's concurrency within one server. The fetches through a pool read its room
// (its concurrency less its active jobs) one at a time, and the jobs a fetch may take count against
// the room until its claim returns: fetches arriving together no longer each see the whole room and
// each claim up to it. Servers sharing a store may still together exceed it by their fetches in
// flight (docs/http-api.md). The zero value is ready.
type poolRooms struct {
	mu    sync.Mutex
	pools map[string]*poolRoom
}

// poolRoom is one pool's: read is held while a fetch reads the room and reserves from it.
type poolRoom struct {
	read     sync.Mutex
	mu       sync.Mutex
	reserved int64
}

// get returns pool name's room.
func (r *poolRooms) get(name string) *poolRoom {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pools == nil {
		r.pools = map[string]*poolRoom{}
	}
	p := r.pools[name]
	if p == nil {
		p = &poolRoom{}
		r.pools[name] = p
	}
	return p
}

// taken is how many jobs the fetches in flight may still claim.
func (p *poolRoom) taken() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.reserved
}

// reserve counts n jobs a fetch may claim (under read); release gives them back once its claim
// returned.
func (p *poolRoom) reserve(n int64) {
	p.mu.Lock()
	p.reserved += n
	p.mu.Unlock()
}

// release waits for a read of the room in progress: a fetch's claim that committed after that read
// began is not in its count of active jobs, so its reservation must still count for it.
func (p *poolRoom) release(n int64) {
	p.read.Lock()
	defer p.read.Unlock()
	p.mu.Lock()
	p.reserved -= n
	p.mu.Unlock()
}
