package capture

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/observe/stream"
)

// Runner runs a function on the lab's event-loop goroutine and waits for
// it; the live runtime's Pacer.Do is one.
type Runner interface {
	Do(ctx context.Context, fn func(now sim.Time)) error
}

// liveFlushInterval is how often (lab time) a live capture pushes what it
// recorded to its readers.
const liveFlushInterval = sim.Millisecond

// liveBuffer bounds what a live capture holds for a reader that is slower
// than the lab: beyond it packets are lost (counted in the capture's
// statistics) rather than stalling the fabric.
const liveBuffer = 16 << 20

// Live serves captures of a running lab over HTTP:
//
//	GET /capture?point=h0[&filter=conn=4,path=9][&count=N]
//
// streams a pcapng file of that capture point until the client goes away,
// N packets were written, or the lab stops. The Capture runs on the loop
// goroutine like any Observer; readers run on HTTP goroutines and never
// block it.
type Live struct {
	c      *Capture
	sched  sim.Scheduler
	run    Runner
	addrOf func(host string) (netip.Addr, bool)

	// Loop goroutine only.
	flush sim.Timer

	mu    sync.Mutex
	pipes map[*stream.Pipe]bool
}

// NewLive returns a live capture server for a network with layout l whose
// loop is driven by sched and run. hostAddr resolves host names in filters
// (nil: addresses only). Install Observer() on the network (with Tee if it
// has other observers) and mount the Live on the control socket.
func NewLive(l Layout, sched sim.Scheduler, run Runner, hostAddr func(string) (netip.Addr, bool)) *Live {
	lv := &Live{c: newCapture(l), sched: sched, run: run, addrOf: hostAddr, pipes: map[*stream.Pipe]bool{}}
	lv.flush.Init(lv.onFlush, nil)
	return lv
}

// Observer returns the fabric observer feeding the live captures.
func (lv *Live) Observer() fabric.Observer { return lv.c }

// onFlush pushes buffered records to readers and retires finished sinks.
// It runs on the loop and re-arms itself while any sink is open.
func (lv *Live) onFlush(now sim.Time, _ any) {
	for _, s := range append([]*sink(nil), lv.c.sinks...) {
		if s.Done() {
			lv.c.remove(s, now) // closes its pipe: the reader ends
			continue
		}
		if err := s.w.Flush(); err != nil {
			lv.c.remove(s, now)
		}
	}
	if len(lv.c.sinks) > 0 {
		lv.sched.Arm(&lv.flush, now+liveFlushInterval)
	}
}

// ServeHTTP implements http.Handler for GET /capture.
func (lv *Live) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	sp, err := ParseSpec(q.Get("point"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var m Matcher
	if fs := q.Get("filter"); fs != "" {
		f, err := ParseFilter(fs, lv.addrOf)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		m = f
	}
	var limit uint64
	if cs := q.Get("count"); cs != "" {
		if limit, err = strconv.ParseUint(cs, 10, 64); err != nil {
			http.Error(w, fmt.Sprintf("count=%q: want a number of packets", cs), http.StatusBadRequest)
			return
		}
	}
	pp := stream.New(liveBuffer)
	var sk *sink
	var addErr error
	err = lv.run.Do(r.Context(), func(now sim.Time) {
		sk, addErr = lv.c.add(sp, pp, m)
		if addErr != nil {
			return
		}
		sk.limit = limit
		sk.room = func(n int) bool { return pp.Room(n + sk.w.bw.Buffered()) }
		if !lv.flush.Armed() {
			lv.sched.Arm(&lv.flush, now)
		}
	})
	if err == nil {
		err = addErr
	}
	if err != nil {
		code := http.StatusBadRequest
		if !errors.Is(err, ErrBadSpec) {
			code = http.StatusServiceUnavailable
		}
		http.Error(w, err.Error(), code)
		return
	}
	lv.mu.Lock()
	lv.pipes[pp] = true
	lv.mu.Unlock()
	defer func() {
		lv.mu.Lock()
		delete(lv.pipes, pp)
		lv.mu.Unlock()
		// Stop recording if the reader left first; the lab may be gone.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		lv.run.Do(ctx, func(now sim.Time) { lv.c.remove(sk, now) })
	}()

	// The sink checks Room before every record, so the pipe never drops
	// part of the pcapng stream: packets that do not fit are counted by
	// the capture instead.
	pp.Serve(w, r, "application/x-pcapng", nil)
}

// Close ends every stream (the lab is stopping).
func (lv *Live) Close() {
	lv.mu.Lock()
	defer lv.mu.Unlock()
	for pp := range lv.pipes {
		pp.Close()
	}
}
