package web

import (
	"bufio"
	"bytes"
	"cmp"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/mrlab/mrlab/internal/sim"
)

// Replay is a recorded run held in memory for playback: every frame's
// changes, indexed so that the lab's state at any frame is a few binary
// searches away, and the trace indexed by connection. It is read-only
// after ReadReplay, so any number of page streams may share it.
type Replay struct {
	Header ReplayHeader
	view   View
	times  []sim.Time
	end    sim.Time

	dirs  []series[DirState]
	down  series[[]string]
	hosts []series[HostState]
	conns []*replayConn // in declaration order
	order []*replayConn // by host, then id
	byKey map[ConnKey]*replayConn

	events  []TraceEvent
	byEnd   map[ConnKey][]int32 // events naming a connection end (see traceKey)
	faults  []FaultEvent
	strings []string
}

type replayConn struct {
	key       ConnKey
	peer      string
	transport string
	planes    []int
	vals      series[connVals]
	paths     []series[pathVals]
	routes    []series[routeVals]
}

// connVals are a connection's values at one frame; gone marks the frame
// it was retired in.
type connVals struct {
	gone                                              bool
	state                                             string
	cwnd, inflight                                    int64
	srtt                                              sim.Time
	tx, acked, retx, timeouts, entropyChanges, peerID uint64
	hint                                              float64
}

type pathVals struct {
	entropy                       uint16
	state                         string
	cwnd, inflight                int64
	srtt, rto                     sim.Time
	tx, acked, ce, retx, timeouts uint64
}

type routeVals struct {
	reached bool
	dirs    []int
}

// series holds a value's changes: v[i] holds from frame at[i] on.
type series[T any] struct {
	at []int32
	v  []T
}

func (s *series[T]) set(frame int, v T) {
	if n := len(s.at); n > 0 && int(s.at[n-1]) == frame {
		s.v[n-1] = v
		return
	}
	s.at = append(s.at, int32(frame))
	s.v = append(s.v, v)
}

// get returns the value at frame k (ok false before the first).
func (s *series[T]) get(k int) (T, bool) {
	i, found := slices.BinarySearch(s.at, int32(k))
	if !found {
		i--
	}
	if i < 0 {
		var zero T
		return zero, false
	}
	return s.v[i], true
}

// OpenReplay reads a replay file (plain or gzip-compressed JSON lines).
func OpenReplay(name string) (*Replay, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("opening replay: %w", err)
	}
	defer f.Close()
	return ReadReplay(f, name)
}

// maxReplayLine bounds one line of a replay file (a frame of a large lab).
const maxReplayLine = 256 << 20

// ReadReplay reads a replay from r; name is used in errors, which give the
// line: "run.replay:12: frame: dirs row 3: direction 900 of 640".
func ReadReplay(r io.Reader, name string) (*Replay, error) {
	br := bufio.NewReaderSize(r, 1<<16)
	if magic, err := br.Peek(2); err == nil && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		defer zr.Close()
		br = bufio.NewReaderSize(zr, 1<<16)
	}
	sc := bufio.NewScanner(br)
	sc.Buffer(make([]byte, 0, 1<<20), maxReplayLine)
	rp := &Replay{byKey: map[ConnKey]*replayConn{}, byEnd: map[ConnKey][]int32{}}
	line := 0
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%s:%d: %s", name, line, fmt.Sprintf(format, args...))
	}
	ended := false
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		if line == 1 {
			if err := rp.header(b); err != nil {
				return nil, bad("%v", err)
			}
			continue
		}
		if ended {
			return nil, bad("records after the end record")
		}
		var rec record
		if err := json.Unmarshal(b, &rec); err != nil {
			return nil, bad("%v", err)
		}
		if err := rp.apply(&rec); err != nil {
			return nil, bad("%s: %v", rec.Type, err)
		}
		ended = rec.Type == "end"
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s:%d: %w", name, line+1, err)
	}
	if line == 0 {
		return nil, fmt.Errorf("%s: empty file, not a replay", name)
	}
	if len(rp.times) == 0 {
		return nil, fmt.Errorf("%s: no frames", name)
	}
	if !ended {
		// A run cut short still plays up to its last frame.
		rp.end = rp.times[len(rp.times)-1]
	}
	slices.SortStableFunc(rp.events, func(a, b TraceEvent) int { return cmp.Compare(a.T, b.T) })
	for i := range rp.events {
		if k, ok := traceKey(&rp.events[i]); ok {
			rp.byEnd[k] = append(rp.byEnd[k], int32(i))
		}
	}
	slices.SortStableFunc(rp.faults, func(a, b FaultEvent) int { return cmp.Compare(a.T, b.T) })
	// Snapshots list connections as a lab does: by host, then id.
	host := map[string]int{}
	for i, h := range rp.Header.Topology.Hosts {
		host[h.Name] = i
	}
	rp.order = slices.Clone(rp.conns)
	slices.SortStableFunc(rp.order, func(a, b *replayConn) int {
		return cmp.Or(cmp.Compare(host[a.key.Host], host[b.key.Host]), cmp.Compare(a.key.ID, b.key.ID))
	})
	return rp, nil
}

func (rp *Replay) header(b []byte) error {
	h := &rp.Header
	if err := json.Unmarshal(b, h); err != nil {
		return fmt.Errorf("header: %w", err)
	}
	if h.Format != ReplayFormat {
		return fmt.Errorf("not a replay file (format %q, want %q)", h.Format, ReplayFormat)
	}
	if h.Version != ReplayVersion {
		return fmt.Errorf("replay version %d: this mrlab reads version %d", h.Version, ReplayVersion)
	}
	if !h.columnsOK() {
		return errors.New("header: columns differ from version 1's")
	}
	t := &h.Topology
	names := map[string]bool{}
	for _, x := range t.Hosts {
		names[x.Name] = true
	}
	for _, x := range t.Switches {
		names[x.Name] = true
	}
	for i, l := range t.Links {
		if !names[l.A] || !names[l.B] {
			return fmt.Errorf("header: topology link %d (%s) joins unknown nodes %q and %q", i, l.Name, l.A, l.B)
		}
	}
	if t.Planes < 1 || t.Planes > 64 {
		return fmt.Errorf("header: topology has %d planes: want 1..64", t.Planes)
	}
	rp.view = Layout(t)
	rp.dirs = make([]series[DirState], t.NumDirs())
	rp.hosts = make([]series[HostState], len(t.Hosts))
	return nil
}

// apply adds one record.
func (rp *Replay) apply(rec *record) error {
	if rec.T < 0 {
		return fmt.Errorf("negative time %d", rec.T)
	}
	switch rec.Type {
	case "str":
		if rec.ID != len(rp.strings) {
			return fmt.Errorf("string id %d out of order (want %d)", rec.ID, len(rp.strings))
		}
		rp.strings = append(rp.strings, rec.S)
	case "conn":
		return rp.conn(rec)
	case "frame":
		return rp.frame(rec)
	case "trace":
		// A line this reader cannot take apart is kept as a note at the
		// record's time.
		ev, ok := ParseTraceLine(rec.Line)
		if !ok {
			ev = TraceEvent{T: rec.T, Path: -1, PSN: -1, Kind: "note", Text: rec.Line}
		}
		rp.events = append(rp.events, ev)
	case "fault":
		rp.faults = append(rp.faults, FaultEvent{T: rec.T, Fault: rec.Fault, Err: rec.Err})
	case "end":
		rp.end = rec.T
	default:
		return fmt.Errorf("unknown record type")
	}
	return nil
}

func (rp *Replay) conn(rec *record) error {
	if rec.N < 0 || rec.N > len(rp.conns) {
		return fmt.Errorf("connection %d declared before %d", rec.N, len(rp.conns))
	}
	if rec.Host == "" {
		return errors.New("no host")
	}
	if len(rec.Planes) > 256 {
		return fmt.Errorf("%d paths: at most 256", len(rec.Planes))
	}
	key := ConnKey{rec.Host, rec.ConnID}
	var c *replayConn
	if rec.N == len(rp.conns) {
		if rp.byKey[key] != nil {
			return fmt.Errorf("%s conn %d declared twice", key.Host, key.ID)
		}
		c = &replayConn{key: key}
		rp.conns = append(rp.conns, c)
		rp.byKey[key] = c
	} else if c = rp.conns[rec.N]; c.key != key {
		return fmt.Errorf("connection %d is %s conn %d, not %s conn %d", rec.N, c.key.Host, c.key.ID, key.Host, key.ID)
	}
	c.peer, c.transport, c.planes = rec.Peer, rec.Transport, rec.Planes
	for len(c.paths) < len(c.planes) {
		c.paths = append(c.paths, series[pathVals]{})
		c.routes = append(c.routes, series[routeVals]{})
	}
	return nil
}

func (rp *Replay) frame(rec *record) error {
	k := len(rp.times)
	if k > 0 && rec.T < rp.times[k-1] {
		return fmt.Errorf("time %v before the previous frame's %v", rec.T, rp.times[k-1])
	}
	rp.times = append(rp.times, rec.T)
	for i, row := range rec.Dirs {
		if len(row) != len(dirColumns) {
			return fmt.Errorf("dirs row %d: %d columns, want %d", i, len(row), len(dirColumns))
		}
		d := int(row[0])
		if row[0] < 0 || d >= len(rp.dirs) {
			return fmt.Errorf("dirs row %d: direction %d of %d", i, row[0], len(rp.dirs))
		}
		prev, _ := rp.dirs[d].get(k)
		rp.dirs[d].set(k, DirState{Up: row[1] != 0, Queue: int(row[2]), TxBytes: uint64(row[3]), Drops: uint64(row[4]),
			Marks: uint64(row[5]), Rate: float64(row[6]), Impair: prev.Impair})
	}
	for d, s := range rec.Impair {
		if d < 0 || d >= len(rp.dirs) {
			return fmt.Errorf("impair: direction %d of %d", d, len(rp.dirs))
		}
		v, _ := rp.dirs[d].get(k)
		v.Impair = s
		rp.dirs[d].set(k, v)
	}
	if rec.SwitchDown != nil {
		rp.down.set(k, *rec.SwitchDown)
	}
	for i, row := range rec.Hosts {
		if len(row) != len(hostColumns) {
			return fmt.Errorf("hosts row %d: %d columns, want %d", i, len(row), len(hostColumns))
		}
		h := int(row[0])
		if row[0] < 0 || h >= len(rp.hosts) {
			return fmt.Errorf("hosts row %d: host %d of %d", i, row[0], len(rp.hosts))
		}
		rp.hosts[h].set(k, HostState{TxBytes: uint64(row[1]), RxBytes: uint64(row[2]), TxPackets: uint64(row[3]),
			RxPackets: uint64(row[4]), CEReceived: uint64(row[5]), Drops: uint64(row[6]), Retransmits: uint64(row[7]),
			Timeouts: uint64(row[8])})
	}
	for i, row := range rec.Conns {
		if len(row) != len(connColumns) {
			return fmt.Errorf("conns row %d: %d columns, want %d", i, len(row), len(connColumns))
		}
		c, err := rp.connAt(row[0])
		if err != nil {
			return fmt.Errorf("conns row %d: %w", i, err)
		}
		state, err := rp.str(row[1])
		if err != nil {
			return fmt.Errorf("conns row %d: %w", i, err)
		}
		c.vals.set(k, connVals{state: state, cwnd: row[2], inflight: row[3], srtt: sim.Time(row[4]), tx: uint64(row[5]),
			acked: uint64(row[6]), retx: uint64(row[7]), timeouts: uint64(row[8]), entropyChanges: uint64(row[9]),
			hint: float64(row[10]), peerID: uint64(row[11])})
	}
	for i, n := range rec.Gone {
		c, err := rp.connAt(int64(n))
		if err != nil {
			return fmt.Errorf("gone %d: %w", i, err)
		}
		c.vals.set(k, connVals{gone: true})
	}
	for i, row := range rec.Paths {
		if len(row) != len(pathColumns) {
			return fmt.Errorf("paths row %d: %d columns, want %d", i, len(row), len(pathColumns))
		}
		c, p, err := rp.pathAt(row[0], row[1])
		if err != nil {
			return fmt.Errorf("paths row %d: %w", i, err)
		}
		state, err := rp.str(row[3])
		if err != nil {
			return fmt.Errorf("paths row %d: %w", i, err)
		}
		c.paths[p].set(k, pathVals{entropy: uint16(row[2]), state: state, cwnd: row[4], inflight: row[5],
			srtt: sim.Time(row[6]), rto: sim.Time(row[7]), tx: uint64(row[8]), acked: uint64(row[9]), ce: uint64(row[10]),
			retx: uint64(row[11]), timeouts: uint64(row[12])})
	}
	for i, row := range rec.Routes {
		if len(row) < 3 {
			return fmt.Errorf("routes row %d: %d columns, want at least 3", i, len(row))
		}
		c, p, err := rp.pathAt(row[0], row[1])
		if err != nil {
			return fmt.Errorf("routes row %d: %w", i, err)
		}
		rv := routeVals{reached: row[2] != 0, dirs: make([]int, 0, len(row)-3)}
		for _, d := range row[3:] {
			if d < 0 || int(d) >= len(rp.dirs) {
				return fmt.Errorf("routes row %d: direction %d of %d", i, d, len(rp.dirs))
			}
			rv.dirs = append(rv.dirs, int(d))
		}
		c.routes[p].set(k, rv)
	}
	return nil
}

func (rp *Replay) connAt(n int64) (*replayConn, error) {
	if n < 0 || n >= int64(len(rp.conns)) {
		return nil, fmt.Errorf("connection %d not declared", n)
	}
	return rp.conns[n], nil
}

func (rp *Replay) pathAt(n, p int64) (*replayConn, int, error) {
	c, err := rp.connAt(n)
	if err != nil {
		return nil, 0, err
	}
	if p < 0 || p >= int64(len(c.paths)) {
		return nil, 0, fmt.Errorf("%s conn %d has no path %d", c.key.Host, c.key.ID, p)
	}
	return c, int(p), nil
}

func (rp *Replay) str(id int64) (string, error) {
	if id < 0 || id >= int64(len(rp.strings)) {
		return "", fmt.Errorf("string %d not declared", id)
	}
	return rp.strings[id], nil
}

// traceKey is the connection end an event names: the deciding host's
// connection, or for a fabric event the destination's connection.
func traceKey(ev *TraceEvent) (ConnKey, bool) {
	if !ev.HasConn {
		return ConnKey{}, false
	}
	if ev.Fabric {
		return ConnKey{ev.Peer, ev.Conn}, ev.Peer != ""
	}
	return ConnKey{ev.Host, ev.Conn}, ev.Host != ""
}

// Frames returns the number of frames.
func (rp *Replay) Frames() int { return len(rp.times) }

// Times returns the first frame's time and the end of the run.
func (rp *Replay) Times() (start, end sim.Time) { return rp.times[0], rp.end }

// FrameAt returns the last frame at or before t (0 before the first).
func (rp *Replay) FrameAt(t sim.Time) int {
	i, found := slices.BinarySearch(rp.times, t)
	if !found {
		i--
	}
	return max(i, 0)
}

// OpenFrame is the frame a replay opens on: the first with an open
// connection or bytes sent on a link (frame 0, recorded at the start of
// the run before anything happened, is an empty picture), or 0 if none.
func (rp *Replay) OpenFrame() int {
	for k := range rp.times {
		if busyFrame(rp.Snapshot(k, nil)) {
			return k
		}
	}
	return 0
}

// busyFrame says a snapshot has something to show: a connection, or a
// link direction that has sent bytes or queues some.
func busyFrame(s *Snapshot) bool {
	if len(s.Conns) > 0 {
		return true
	}
	for _, d := range s.Dirs {
		if d.TxBytes > 0 || d.Queue > 0 {
			return true
		}
	}
	return false
}

// Snapshot rebuilds the lab's state at frame k, with the paths of the
// connections sel selects (nil: none).
func (rp *Replay) Snapshot(k int, sel func(ConnKey) bool) *Snapshot {
	s := &Snapshot{T: rp.times[k], Dirs: make([]DirState, len(rp.dirs)), Hosts: make([]HostState, len(rp.hosts))}
	for i := range rp.dirs {
		s.Dirs[i], _ = rp.dirs[i].get(k)
	}
	s.SwitchDown, _ = rp.down.get(k)
	for i := range rp.hosts {
		s.Hosts[i], _ = rp.hosts[i].get(k)
	}
	for _, c := range rp.order {
		if cs, ok := rp.connState(c, k, sel != nil && sel(c.key)); ok {
			s.Conns = append(s.Conns, cs)
		}
	}
	return s
}

// connState is connection c at frame k (ok false if not open then).
func (rp *Replay) connState(c *replayConn, k int, paths bool) (ConnState, bool) {
	v, ok := c.vals.get(k)
	if !ok || v.gone {
		return ConnState{}, false
	}
	cs := ConnState{ConnKey: c.key, Peer: c.peer, PeerID: uint32(v.peerID), Transport: c.transport, State: v.state,
		Cwnd: v.cwnd, InFlight: v.inflight, SRTT: v.srtt, TxBytes: v.tx, Acked: v.acked, Retransmits: v.retx,
		Timeouts: v.timeouts, EntropyChanges: v.entropyChanges, RateHint: v.hint, NumPaths: len(c.planes)}
	if !paths {
		return cs, true
	}
	cs.Paths = make([]PathState, len(c.planes))
	for i := range cs.Paths {
		p, _ := c.paths[i].get(k)
		r, _ := c.routes[i].get(k)
		cs.Paths[i] = PathState{Plane: c.planes[i], Entropy: p.entropy, State: p.state, Cwnd: p.cwnd, InFlight: p.inflight,
			SRTT: p.srtt, RTO: p.rto, TxBytes: p.tx, Acked: p.acked, CEAcked: p.ce, Retransmits: p.retx,
			Timeouts: p.timeouts, Route: r.dirs, Reached: r.reached}
	}
	return cs, true
}

// connHistory returns connection key's states at frames k-n+1..k (nil
// where it was not open) and their times.
func (rp *Replay) connHistory(key ConnKey, k, n int) ([]*ConnState, []sim.Time) {
	c := rp.byKey[key]
	if c == nil {
		return nil, nil
	}
	lo := max(k-n+1, 0)
	hist := make([]*ConnState, 0, k-lo+1)
	times := make([]sim.Time, 0, k-lo+1)
	for j := lo; j <= k; j++ {
		var p *ConnState
		if cs, ok := rp.connState(c, j, true); ok {
			p = &cs
		}
		hist = append(hist, p)
		times = append(times, rp.times[j])
	}
	return hist, times
}

// ladder returns the last n trace events at or before t of connection c.
func (rp *Replay) ladder(c *ConnState, t sim.Time, n int) []TraceEvent {
	own := rp.byEnd[c.ConnKey]
	var peer []int32
	if c.PeerID != 0 {
		peer = rp.byEnd[ConnKey{c.Peer, c.PeerID}]
	}
	// Walk both index lists backwards, newest first.
	i, j := rp.before(own, t), rp.before(peer, t)
	var out []TraceEvent
	for len(out) < n && (i >= 0 || j >= 0) {
		var e int32
		if j < 0 || (i >= 0 && own[i] > peer[j]) {
			e, i = own[i], i-1
		} else {
			e, j = peer[j], j-1
		}
		if ev := &rp.events[e]; c.Involves(ev) {
			out = append(out, *ev)
		}
	}
	slices.Reverse(out)
	return out
}

// before returns the position of the last index in idx whose event is at
// or before t, or -1.
func (rp *Replay) before(idx []int32, t sim.Time) int {
	i, _ := slices.BinarySearchFunc(idx, t+1, func(e int32, t sim.Time) int { return cmp.Compare(rp.events[e].T, t) })
	return i - 1
}

// faultsUpTo returns the faults fired at or before t.
func (rp *Replay) faultsUpTo(t sim.Time) []FaultEvent {
	i, _ := slices.BinarySearchFunc(rp.faults, t+1, func(f FaultEvent, t sim.Time) int { return cmp.Compare(f.T, t) })
	return rp.faults[:i]
}

// Frame builds frame k for the page, with rates against frame prev (-1:
// the frame before k) and sel's detail (nil: none).
func (rp *Replay) Frame(k, prev int, sel *ConnKey) *Frame {
	if prev < 0 {
		prev = k - 1
	}
	var ps *Snapshot
	if prev >= 0 && prev < k {
		ps = rp.Snapshot(prev, selects(sel))
	}
	f, _ := rp.frameAfter(k, ps, sel)
	return f
}

// frameAfter builds frame k with rates against the snapshot prev (which
// must have sel's paths; nil: no rates) and returns frame k's snapshot
// for the next call.
func (rp *Replay) frameAfter(k int, prev *Snapshot, sel *ConnKey) (*Frame, *Snapshot) {
	in := &frameInput{cur: rp.Snapshot(k, selects(sel)), prev: prev, index: k, sel: sel, faults: rp.faultsUpTo(rp.times[k])}
	if sel != nil {
		in.hist, in.histT = rp.connHistory(*sel, k, histLen)
		if c := findConn(in.cur, *sel); c != nil {
			in.ladder = rp.ladder(c, in.cur.T, ladderLen)
		}
	}
	return buildFrame(in), in.cur
}

// selects is the path selection for a selected connection.
func selects(sel *ConnKey) func(ConnKey) bool {
	if sel == nil {
		return nil
	}
	return func(k ConnKey) bool { return k == *sel }
}

// ConnRows lists host's connections at frame k with their send rates.
func (rp *Replay) ConnRows(k int, host string) []ConnRow {
	var prev *Snapshot
	if k > 0 {
		prev = rp.Snapshot(k-1, nil)
	}
	return connRows(prev, rp.Snapshot(k, nil), host)
}
