package web

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/mrlab/mrlab/internal/natural"

	"github.com/mrlab/mrlab/internal/sim"
)

// Lab is a running live lab as the web view reaches it (through its
// control socket; mrlab web adapts labs/live's client to it).
type Lab interface {
	// Topology returns the lab's fabric.
	Topology(ctx context.Context) (Topology, error)
	// Snapshot reads the lab's state now, with the paths of the
	// connections listed.
	Snapshot(ctx context.Context, paths []ConnKey) (*Snapshot, error)
	// Trace streams the protocol trace with the fabric's drops, one line
	// per decision, until ctx ends.
	Trace(ctx context.Context) (io.ReadCloser, error)
	// Fault applies a fault through the lab's own validation.
	Fault(ctx context.Context, f FaultRequest) error
}

// FaultRequest is a fault button: Target link, switch or plane; Name the
// link or switch name or the plane number; Action down, up or (links)
// impair, with Impair in netem's spelling ("loss 1%", "none").
type FaultRequest struct {
	Target string `json:"target"`
	Name   string `json:"name"`
	Action string `json:"action"`
	Impair string `json:"impair,omitempty"`
}

// Live follows a running lab for any number of page streams: while at
// least one page watches, it polls the lab every period (one snapshot,
// with the paths of the connections pages have selected) and reads its
// trace; with no page watching it asks the lab nothing.
type Live struct {
	lab    Lab
	name   string
	topo   Topology
	view   View
	period time.Duration
	logf   func(string, ...any)

	mu      sync.Mutex
	subs    map[*liveSub]struct{}
	stop    context.CancelFunc
	done    chan struct{}
	latest  *Snapshot
	prev    *Snapshot // the snapshot before latest
	hist    map[ConnKey]*connRing
	events  []TraceEvent // the newest traceKeep, oldest first
	faults  []FaultEvent // derived from state changes, oldest first
	pollErr error
	kick    chan struct{}
}

type liveSub struct {
	sel    *ConnKey
	notify chan struct{}
}

// connRing is a selected connection's recent states.
type connRing struct {
	states []*ConnState
	times  []sim.Time
}

// Live limits.
const (
	traceKeep  = 20000 // trace events kept for ladders
	faultsKeep = 200   // derived fault events kept
)

// NewLive reads the lab's topology and returns a follower polling every
// period (0: 100ms). logf hears of poll errors (nil discards).
func NewLive(ctx context.Context, name string, lab Lab, period time.Duration, logf func(string, ...any)) (*Live, error) {
	topo, err := lab.Topology(ctx)
	if err != nil {
		return nil, fmt.Errorf("lab %s: reading its topology: %w", name, err)
	}
	if period <= 0 {
		period = 100 * time.Millisecond
	}
	if logf == nil {
		logf = func(string, ...any) {}
	}
	return &Live{lab: lab, name: name, topo: topo, view: Layout(&topo), period: period, logf: logf,
		subs: map[*liveSub]struct{}{}, hist: map[ConnKey]*connRing{}, kick: make(chan struct{}, 1)}, nil
}

// Topology returns the lab's topology.
func (l *Live) Topology() Topology { return l.topo }

// Fault applies f through the lab, then polls at once so pages see it.
func (l *Live) Fault(ctx context.Context, f FaultRequest) error {
	if err := l.lab.Fault(ctx, f); err != nil {
		return err
	}
	select {
	case l.kick <- struct{}{}:
	default:
	}
	return nil
}

// subscribe registers a page stream, starting the poller for the first.
func (l *Live) subscribe(sel *ConnKey) *liveSub {
	s := &liveSub{sel: sel, notify: make(chan struct{}, 1)}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.subs[s] = struct{}{}
	if l.stop == nil {
		ctx, cancel := context.WithCancel(context.Background())
		l.stop, l.done = cancel, make(chan struct{})
		go l.run(ctx, l.done)
	}
	if l.latest != nil {
		s.notify <- struct{}{}
	}
	return s
}

// unsubscribe removes a stream, stopping the poller after the last.
func (l *Live) unsubscribe(s *liveSub) {
	l.mu.Lock()
	delete(l.subs, s)
	var done chan struct{}
	if len(l.subs) == 0 && l.stop != nil {
		l.stop()
		done = l.done
		l.stop, l.done = nil, nil
		l.latest, l.prev = nil, nil
	}
	l.mu.Unlock()
	if done != nil {
		<-done
	}
}

// run polls the lab and reads its trace until ctx ends.
func (l *Live) run(ctx context.Context, done chan struct{}) {
	defer close(done)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		l.readTrace(ctx)
	}()
	t := time.NewTicker(l.period)
	defer t.Stop()
	for {
		l.poll(ctx)
		select {
		case <-ctx.Done():
			wg.Wait()
			return
		case <-t.C:
		case <-l.kick:
		}
	}
}

// poll takes one snapshot and wakes the streams.
func (l *Live) poll(ctx context.Context) {
	l.mu.Lock()
	selected := map[ConnKey]bool{}
	for s := range l.subs {
		if s.sel != nil {
			selected[*s.sel] = true
		}
	}
	l.mu.Unlock()
	keys := slices.SortedFunc(maps.Keys(selected), func(a, b ConnKey) int {
		if c := natural.Compare(a.Host, b.Host); c != 0 {
			return c
		}
		return int(a.ID) - int(b.ID)
	})
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	snap, err := l.lab.Snapshot(qctx, keys)
	cancel()
	if ctx.Err() != nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		if l.pollErr == nil {
			l.logf("lab %s: %v", l.name, err)
		}
		l.pollErr = err
	} else {
		l.pollErr = nil
		if len(snap.Dirs) != l.topo.NumDirs() {
			l.pollErr = fmt.Errorf("lab %s: snapshot has %d link directions, its topology %d", l.name, len(snap.Dirs), l.topo.NumDirs())
		} else {
			if l.latest != nil {
				l.faults = append(l.faults, deriveFaults(&l.topo, l.latest, snap)...)
				if n := len(l.faults); n > faultsKeep {
					l.faults = slices.Delete(l.faults, 0, n-faultsKeep)
				}
			}
			l.prev, l.latest = l.latest, snap
			l.record(snap, selected)
		}
	}
	for s := range l.subs {
		select {
		case s.notify <- struct{}{}:
		default:
		}
	}
}

// record keeps the selected connections' history.
func (l *Live) record(snap *Snapshot, selected map[ConnKey]bool) {
	for k := range l.hist {
		if !selected[k] {
			delete(l.hist, k)
		}
	}
	for k := range selected {
		r := l.hist[k]
		if r == nil {
			r = &connRing{}
			l.hist[k] = r
		}
		r.states = append(r.states, findConn(snap, k))
		r.times = append(r.times, snap.T)
		if len(r.states) > histLen {
			r.states = slices.Delete(r.states, 0, len(r.states)-histLen)
			r.times = slices.Delete(r.times, 0, len(r.times)-histLen)
		}
	}
}

// readTrace follows the lab's trace, keeping the newest events. A lab
// that cannot stream its trace leaves the ladder empty.
func (l *Live) readTrace(ctx context.Context) {
	rc, err := l.lab.Trace(ctx)
	if err != nil {
		if ctx.Err() == nil {
			l.logf("lab %s: no protocol trace for the ladder: %v", l.name, err)
		}
		return
	}
	defer rc.Close()
	go func() {
		<-ctx.Done()
		rc.Close()
	}()
	sc := bufio.NewScanner(rc)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		ev, ok := ParseTraceLine(sc.Text())
		if !ok {
			continue
		}
		l.mu.Lock()
		l.events = append(l.events, ev)
		if len(l.events) > 2*traceKeep {
			l.events = slices.Delete(l.events, 0, len(l.events)-traceKeep)
		}
		l.mu.Unlock()
	}
}

// frame builds the frame for one stream from the latest snapshot, with
// rates against prev (the snapshot the stream showed last; nil: the one
// before latest). It returns nil when there is nothing new to show.
func (l *Live) frame(sel *ConnKey, prev *Snapshot) (*Frame, *Snapshot, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	cur := l.latest
	if cur == nil {
		return nil, nil, l.pollErr
	}
	if cur == prev {
		return nil, cur, l.pollErr
	}
	if prev == nil {
		prev = l.prev
	}
	in := &frameInput{prev: prev, cur: cur, index: -1, sel: sel, faults: slices.Clone(l.faults)}
	if sel != nil {
		if r := l.hist[*sel]; r != nil {
			in.hist, in.histT = slices.Clone(r.states), slices.Clone(r.times)
		}
		if c := findConn(cur, *sel); c != nil {
			in.ladder = lastEvents(l.events, c, cur.T, ladderLen)
		}
	}
	return buildFrame(in), cur, l.pollErr
}

// deriveFaults names what changed between two snapshots as faults, the way
// the CLI spells them: a plane whose switches all went down or up
// together, a switch, a link not explained by its switch, an impairment.
// They are stamped with the later snapshot's time: the change happened at
// or before it.
func deriveFaults(t *Topology, prev, cur *Snapshot) []FaultEvent {
	var out []FaultEvent
	add := func(format string, args ...any) {
		out = append(out, FaultEvent{T: cur.T, Fault: fmt.Sprintf(format, args...)})
	}
	wasDown, isDown := setOf(prev.SwitchDown), setOf(cur.SwitchDown)
	changed := map[string]bool{}
	planeSw := map[int][]string{}
	for _, s := range t.Switches {
		planeSw[s.Plane] = append(planeSw[s.Plane], s.Name)
		if wasDown[s.Name] != isDown[s.Name] {
			changed[s.Name] = true
		}
	}
	reported := map[string]bool{}
	for p := range max(t.Planes, 1) {
		sws := planeSw[p]
		if len(sws) < 2 {
			continue
		}
		all, down := true, isDown[sws[0]]
		for _, s := range sws {
			all = all && changed[s] && isDown[s] == down
		}
		if all {
			add("plane %d %s", p, upDown(!down))
			for _, s := range sws {
				reported[s] = true
			}
		}
	}
	for _, s := range t.Switches {
		if changed[s.Name] && !reported[s.Name] {
			add("switch %s %s", s.Name, upDown(!isDown[s.Name]))
		}
	}
	for i, lk := range t.Links {
		a, b := 2*i, 2*i+1
		if b >= len(prev.Dirs) || b >= len(cur.Dirs) {
			break
		}
		if prev.Dirs[a].Up != cur.Dirs[a].Up && !changed[lk.A] && !changed[lk.B] {
			add("link %s %s", lk.Name, upDown(cur.Dirs[a].Up))
		}
		pa, pb, ca, cb := prev.Dirs[a].Impair, prev.Dirs[b].Impair, cur.Dirs[a].Impair, cur.Dirs[b].Impair
		if pa == ca && pb == cb {
			continue
		}
		switch {
		case ca == cb:
			add("link %s impair %s", lk.Name, strconv.Quote(noneIfEmpty(ca)))
		default:
			if pa != ca {
				add("link %s impair %s dir ab", lk.Name, strconv.Quote(noneIfEmpty(ca)))
			}
			if pb != cb {
				add("link %s impair %s dir ba", lk.Name, strconv.Quote(noneIfEmpty(cb)))
			}
		}
	}
	return out
}

func setOf(names []string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

func upDown(up bool) string {
	if up {
		return "up"
	}
	return "down"
}

func noneIfEmpty(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
