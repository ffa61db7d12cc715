package uverbs

import (
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/internal/verbsabi"
	"github.com/mrlab/mrlab/transport"
)

// DoorbellHorizon is how soon the loop must be due to wake by itself for
// clients not to be asked to ring their doorbells while it sleeps: a post
// made meanwhile is found when the loop wakes, no later than a doorbell's
// wake-up (tens of microseconds on a busy machine) would have got it
// there. So a busy lab, whose loop sleeps only between closely spaced
// events, is never rung; an idle one is rung once per sleep.
const DoorbellHorizon = 50 * time.Microsecond

// Set is every endpoint of a lab, polled by the lab's loop: it implements
// the live pacer's Poller.
type Set struct {
	loop Loop

	mu  sync.Mutex // guards eps
	eps []*Endpoint

	// Loop-goroutine state.
	polled  []*client // clients past HELLO
	sleeps  uint32    // the loop's sleeps so far: the need_wakeup value
	portsAt sim.Time  // when Poll next looks at the NICs' links
}

// PortCheckInterval is how often, in lab time, a busy loop's Poll looks at
// the NICs' links for the clients' ports_up word; a loop about to sleep
// (Sleeping) always looks first.
const PortCheckInterval = sim.Millisecond

// checkPorts updates every endpoint's ports_up word (Endpoint.checkPorts).
func (s *Set) checkPorts(now sim.Time) {
	s.portsAt = now + PortCheckInterval
	s.mu.Lock()
	eps := s.eps
	s.mu.Unlock()
	for _, e := range eps {
		e.checkPorts(now)
	}
}

// NewSet returns an empty set whose endpoints run on loop.
func NewSet(loop Loop) *Set { return &Set{loop: loop} }

// Add starts serving a host's endpoint on ln (from Listen). Call it before
// the loop runs: it reads the NIC.
func (s *Set) Add(cfg Config, ln *net.UnixListener) (*Endpoint, error) {
	if cfg.NIC == nil || ln == nil {
		return nil, fmt.Errorf("verbs endpoint %s: no NIC or socket", cfg.Host)
	}
	cfg.fill()
	e := &Endpoint{cfg: cfg, set: s, ln: ln, all: map[*client]bool{}, clients: map[uint32]*client{}, ports: map[uint16]*listener{},
		addr: cfg.NIC.Addr().As4()}
	for _, k := range []struct {
		kind transport.Kind
		bit  uint32
	}{{transport.MetaRoCE, verbsabi.TransportMetaRoCE}, {transport.RoCEv2, verbsabi.TransportRoCEv2}} {
		if cfg.NIC.Protocol(k.kind) != nil {
			e.trans |= 1 << k.bit
		}
	}
	s.mu.Lock()
	s.eps = append(s.eps, e)
	s.mu.Unlock()
	e.rwg.Add(1)
	go e.serve()
	return e, nil
}

// Poll serves what clients posted since the last look: it runs on the
// loop between events. It reports whether it found work.
func (s *Set) Poll(now sim.Time) bool {
	if now >= s.portsAt {
		s.checkPorts(now)
	}
	found := false
	for _, c := range s.polled {
		if c.flagged {
			c.setNeedWakeup(0)
		}
		if c.poll(now) {
			found = true
		}
	}
	return found
}

// Sleeping runs before the loop blocks until until. Unless it is due
// within DoorbellHorizon, every client is told to ring its doorbell from
// now on; then the rings are looked at once more, so a post that raced the
// flag is not left waiting. It reports whether work arrived (the loop then
// does not sleep).
func (s *Set) Sleeping(now, until sim.Time) bool {
	s.checkPorts(now)
	if until-now <= sim.Time(DoorbellHorizon) {
		for _, c := range s.polled {
			if c.posted() {
				return true
			}
		}
		return false
	}
	s.sleeps++
	if s.sleeps == 0 {
		s.sleeps++
	}
	for _, c := range s.polled {
		c.setNeedWakeup(s.sleeps)
	}
	for _, c := range s.polled {
		if c.posted() {
			return true
		}
	}
	return false
}

func (s *Set) now() sim.Time { return s.loop.Now() }

func (s *Set) addPolled(c *client) { s.polled = append(s.polled, c) }

func (s *Set) removePolled(c *client) {
	for i, x := range s.polled {
		if x == c {
			s.polled = append(s.polled[:i], s.polled[i+1:]...)
			return
		}
	}
}

// Close stops every endpoint and releases what its clients held. Call it
// after the loop has stopped (the lab's teardown): it touches the NICs.
func (s *Set) Close() {
	s.mu.Lock()
	eps := s.eps
	s.eps = nil
	s.mu.Unlock()
	for _, e := range eps {
		e.shutdown()
	}
	for _, e := range eps {
		e.rwg.Wait() // readers and the accept loop: they no longer post
		e.mu.Lock()
		var left []*client
		for c := range e.all {
			left = append(left, c)
		}
		e.mu.Unlock()
		for _, c := range left {
			c.close(0, "lab stopping")
		}
		e.wwg.Wait()
	}
}

// ClientStatus is one open client of a host's endpoint.
type ClientStatus struct {
	PID       int    `json:"pid"`
	Name      string `json:"name"`
	QPs       int    `json:"qps"`
	Connected int    `json:"connected"`
	CQs       int    `json:"cqs"`
	MRs       int    `json:"mrs"`
	MRBytes   uint64 `json:"mr_bytes"`
	Listening []int  `json:"listening,omitempty"`
	// Posted counts work requests taken from the client's rings;
	// Completed the completions written to its CQs; Doorbells the times
	// it had to ring (the endpoint was not polling); Events the CQ events
	// signalled (the client was blocked waiting).
	Posted    uint64 `json:"posted"`
	Completed uint64 `json:"completed"`
	Doorbells uint64 `json:"doorbells"`
	Events    uint64 `json:"events"`
	// Limited counts the client's requests refused at a QP or listener
	// limit (its own, or its host's).
	Limited uint64 `json:"limited,omitempty"`
}

// Status lists each host's open clients. Run it on the loop.
func (s *Set) Status() map[string][]ClientStatus {
	s.mu.Lock()
	eps := s.eps
	s.mu.Unlock()
	out := map[string][]ClientStatus{}
	for _, e := range eps {
		list := []ClientStatus{}
		for _, c := range e.clientsInOrder() {
			list = append(list, c.status())
		}
		out[e.cfg.Host] = list
	}
	return out
}
