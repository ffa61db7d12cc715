package prototrace

import (
	"fmt"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/observe/stream"
	"github.com/mrlab/mrlab/transport"
)

// Hub is a live lab's protocol trace. The lab gives every NIC the hub's
// tracer for its host (Hub.Host) and installs Hub.Fabric on the network
// once; readers subscribe over HTTP (GET /trace), each with its own filter.
// With no reader a traced decision costs one atomic load and nothing is
// formatted.
//
// Tracers and the fabric observer run on the lab's loop goroutine; readers
// on HTTP goroutines. A reader that falls behind loses whole lines (they
// are counted and reported when it ends), it never slows the lab.
type Hub struct {
	n   *fabric.Network
	nm  func(netip.Addr) string
	mu  sync.Mutex
	sub map[*subscriber]struct{}
	cnt atomic.Int32
}

type subscriber struct {
	log    *Log
	pipe   *stream.Pipe
	hosts  map[string]transport.Tracer
	fabric fabric.Observer
}

// NewHub returns a hub. n and names describe fabric events in the trace
// (names maps addresses to hosts; nil prints addresses); n may be nil.
func NewHub(n *fabric.Network, names func(netip.Addr) string) *Hub {
	return &Hub{n: n, nm: names, sub: map[*subscriber]struct{}{}}
}

// Host returns the tracer for host's NIC (set it in the NIC's Config).
func (h *Hub) Host(name string, peer PeerFunc) transport.Tracer {
	return &hubTracer{h: h, host: name, peer: peer}
}

var (
	_ transport.Tracer = (*hubTracer)(nil)
	_ fabric.Observer  = hubFabric{}
)

type hubTracer struct {
	h    *Hub
	host string
	peer PeerFunc
}

func (t *hubTracer) Tracef(now sim.Time, conn uint32, format string, args ...any) {
	if t.h.cnt.Load() == 0 {
		return
	}
	t.h.mu.Lock()
	defer t.h.mu.Unlock()
	for s := range t.h.sub {
		tr := s.hosts[t.host]
		if tr == nil {
			tr = s.log.Host(t.host, t.peer)
			s.hosts[t.host] = tr
		}
		tr.Tracef(now, conn, format, args...)
		s.log.Flush()
	}
}

// Fabric returns the observer that puts fabric drops into subscribers'
// traces (those that asked for them). Install it on the network, with
// capture.Tee if there are other observers.
func (h *Hub) Fabric() fabric.Observer { return hubFabric{h} }

type hubFabric struct{ h *Hub }

func (f hubFabric) Observe(now sim.Time, ev fabric.Event, pt fabric.Point, p *packet.Buffer, r fabric.DropReason) {
	if f.h.cnt.Load() == 0 || ev == fabric.EvEnqueue || ev == fabric.EvTransmit || ev == fabric.EvDeliver {
		return
	}
	f.h.mu.Lock()
	defer f.h.mu.Unlock()
	for s := range f.h.sub {
		if s.fabric != nil {
			s.fabric.Observe(now, ev, pt, p, r)
			s.log.Flush()
		}
	}
}

// liveBuffer bounds what a reader may have pending.
const liveBuffer = 4 << 20

// ServeHTTP streams the trace as text lines:
//
//	GET /trace[?filter=host=h3,path=9][&fabric=drops,marks]
//
// until the client goes away or the hub is closed.
func (h *Hub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f, err := ParseFilter(q.Get("filter"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	events, err := ParseFabricEvents(q.Get("fabric"))
	if err != nil {
		http.Error(w, "fabric="+err.Error(), http.StatusBadRequest)
		return
	}
	// The Log flushes after every line, so the pipe drops whole lines.
	pp := stream.New(liveBuffer)
	s := &subscriber{log: New(pp, f), pipe: pp, hosts: map[string]transport.Tracer{}}
	if events != 0 && h.n != nil {
		s.fabric = s.log.Fabric(h.n, h.nm, events)
	}
	h.mu.Lock()
	h.sub[s] = struct{}{}
	h.cnt.Add(1)
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		delete(h.sub, s)
		h.cnt.Add(-1)
		h.mu.Unlock()
	}()

	pp.Serve(w, r, "text/plain; charset=utf-8", func(dst []byte, lost uint64) []byte {
		return fmt.Appendf(dst, "# %d trace lines lost: this reader fell behind\n", lost)
	})
}

// Close ends every reader's stream.
func (h *Hub) Close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.sub {
		s.pipe.Close()
	}
}

// Readers returns how many readers are subscribed.
func (h *Hub) Readers() int { return int(h.cnt.Load()) }
