package web

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strconv"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/observe/prototrace"
	"github.com/mrlab/mrlab/softnic"
	"github.com/mrlab/mrlab/transport"
)

// DefaultRecordInterval is the sampling period of a recording when none is
// given: 10us of lab time, the telemetry default.
const DefaultRecordInterval = 10 * sim.Microsecond

// Recorder writes a sim run to a replay file: a snapshot of the lab every
// interval of lab time (only what changed since the last), the protocol
// trace with the fabric's events, and the faults as they fire. It runs on
// the lab's loop. It exists only when a recording is asked for; a run
// without one does nothing extra.
//
// Use: NewRecorder once the network is built; give each NIC's transports
// Tracer(host) and register the NIC with AddNIC; install FabricObserver on
// the network (teed with any other observer); report the fault timeline
// through Fault; Start; Close at the end of the run.
type Recorder struct {
	sched sim.Scheduler
	every sim.Time
	probe *Probe
	w     *bufio.Writer
	c     io.Closer
	enc   *json.Encoder
	err   error
	timer sim.Timer
	last  sim.Time

	trace *prototrace.Log
	fobs  fabric.Observer
	lines lineSplitter
	nics  map[string]*softnic.NIC

	// What was last written, so a frame holds only changes.
	strs    map[string]int
	conns   map[ConnKey]*recConn
	order   []*recConn
	dirs    [][]int64
	impair  []string
	hosts   [][]int64
	down    []string
	frames  int
	frame   frameBuf
	scratch []int64
	buf     []byte
}

type recConn struct {
	n      int
	decl   record
	vals   []int64
	paths  [][]int64
	routes [][]int64
	live   bool
}

// NewRecorder writes a replay file's header to w (closed by Close if it is
// an io.Closer) for network n, to be sampled every interval (0 means
// DefaultRecordInterval). events selects the fabric events the trace
// keeps (0 means drops).
func NewRecorder(w io.Writer, sched sim.Scheduler, n *fabric.Network, meta ReplayMeta, every sim.Time, events prototrace.FabricEvents) (*Recorder, error) {
	if every <= 0 {
		every = DefaultRecordInterval
	}
	r := &Recorder{sched: sched, every: every, probe: NewProbe(n), w: bufio.NewWriterSize(w, 256<<10),
		nics: map[string]*softnic.NIC{}, strs: map[string]int{}, conns: map[ConnKey]*recConn{}, last: -1}
	if c, ok := w.(io.Closer); ok {
		r.c = c
	}
	r.enc = json.NewEncoder(r.w)
	r.enc.SetEscapeHTML(false)
	r.lines.r = r
	r.trace = prototrace.New(&r.lines, prototrace.Filter{})
	if events == 0 {
		events = prototrace.TraceDrops
	}
	r.fobs = r.trace.Fabric(n, r.hostName, events)
	r.timer.Init(func(now sim.Time, _ any) {
		r.Sample(now)
		r.sched.Arm(&r.timer, now+r.every)
	}, nil)
	r.write(newHeader(meta, r.probe.Topology(), every))
	if r.err != nil {
		return nil, r.err
	}
	return r, nil
}

func (r *Recorder) hostName(a netip.Addr) string { return r.probe.names[a] }

// Tracer returns the protocol tracer for host's transports: their
// decisions go into the recording's trace.
func (r *Recorder) Tracer(host string) transport.Tracer {
	return r.trace.Host(host, func(id uint32) string {
		if nic := r.nics[host]; nic != nil {
			for _, c := range nic.Conns() {
				if c.ID() == id {
					return r.probe.names[c.Peer()]
				}
			}
		}
		return ""
	})
}

// FabricObserver returns the observer that puts the fabric's events (drops,
// and marks or corruptions if asked) into the recording's trace.
func (r *Recorder) FabricObserver() fabric.Observer { return r.fobs }

// AddNIC registers a host's NIC: its counters and connections are recorded.
func (r *Recorder) AddNIC(host string, nic *softnic.NIC) {
	r.nics[host] = nic
	r.probe.AddNIC(host, nic)
}

// Fault records a fault of the timeline as it fires: its description
// without the time ("link p0-leaf0-spine1 down") and its error, if any.
func (r *Recorder) Fault(now sim.Time, fault string, err error) {
	rec := record{Type: "fault", T: now, Fault: fault}
	if err != nil {
		rec.Err = err.Error()
	}
	r.write(rec)
}

// Start takes the first sample now and then one every interval.
func (r *Recorder) Start(now sim.Time) {
	r.Sample(now)
	r.sched.Arm(&r.timer, now+r.every)
}

// Err returns the first write error.
func (r *Recorder) Err() error { return r.err }

// Frames returns the number of frames written.
func (r *Recorder) Frames() int { return r.frames }

// Close takes a last sample at now (the end of the run), ends the file
// and closes it.
func (r *Recorder) Close(now sim.Time) error {
	r.sched.Disarm(&r.timer)
	if now > r.last {
		r.Sample(now)
	}
	r.flushTrace()
	r.write(record{Type: "end", T: now})
	if r.err == nil {
		if err := r.w.Flush(); err != nil {
			r.err = fmt.Errorf("writing replay: %w", err)
		}
	}
	if r.c != nil {
		if err := r.c.Close(); err != nil && r.err == nil {
			r.err = fmt.Errorf("closing replay: %w", err)
		}
	}
	return r.err
}

func (r *Recorder) write(v any) {
	if r.err != nil {
		return
	}
	if err := r.enc.Encode(v); err != nil {
		r.err = fmt.Errorf("writing replay: %w", err)
	}
}

func (r *Recorder) flushTrace() {
	if err := r.trace.Flush(); err != nil && r.err == nil {
		r.err = err
	}
	r.lines.flush()
}

// str returns the id of s, declaring it first if new.
func (r *Recorder) str(s string) int {
	id, ok := r.strs[s]
	if !ok {
		id = len(r.strs)
		r.strs[s] = id
		r.write(record{Type: "str", ID: id, S: s})
	}
	return id
}

// Sample writes a frame: every row that changed since the last frame.
func (r *Recorder) Sample(now sim.Time) {
	r.flushTrace()
	r.last = now
	snap := r.probe.Snapshot(now, func(ConnKey) bool { return true })
	f := &r.frame
	f.reset()
	if r.dirs == nil {
		r.dirs, r.impair = make([][]int64, len(snap.Dirs)), make([]string, len(snap.Dirs))
		r.hosts = make([][]int64, len(snap.Hosts))
	}
	var impair map[int]string
	for i := range snap.Dirs {
		d := &snap.Dirs[i]
		r.row(&f.dirs, &r.dirs[i], dirRow(r.scratch[:0], i, d))
		if d.Impair != r.impair[i] || (r.frames == 0 && d.Impair != "") {
			if impair == nil {
				impair = map[int]string{}
			}
			impair[i] = d.Impair
			r.impair[i] = d.Impair
		}
	}
	for i := range snap.Hosts {
		r.row(&f.hosts, &r.hosts[i], hostRow(r.scratch[:0], i, &snap.Hosts[i]))
	}
	for _, rc := range r.order {
		rc.live = false
	}
	for i := range snap.Conns {
		r.conn(&snap.Conns[i])
	}
	var gone []int
	for _, rc := range r.order {
		if !rc.live && rc.vals != nil {
			gone = append(gone, rc.n)
			rc.vals, rc.paths, rc.routes = nil, nil, nil
		}
	}
	// The frame line, its sections in the order the format lists them.
	b := append(r.buf[:0], `{"type":"frame","t":`...)
	b = strconv.AppendInt(b, int64(now), 10)
	b = f.dirs.close(b, "dirs")
	if impair != nil {
		b = appendJSONField(b, "impair", impair)
	}
	if r.frames == 0 || !slices.Equal(snap.SwitchDown, r.down) {
		r.down = append([]string{}, snap.SwitchDown...)
		b = appendJSONField(b, "switch_down", r.down)
	}
	b = f.hosts.close(b, "hosts")
	b = f.conns.close(b, "conns")
	if gone != nil {
		b = appendJSONField(b, "gone", gone)
	}
	b = f.paths.close(b, "paths")
	b = f.routes.close(b, "routes")
	b = append(b, "}\n"...)
	r.buf = b
	if r.err == nil {
		if _, err := r.w.Write(b); err != nil {
			r.err = fmt.Errorf("writing replay: %w", err)
		}
	}
	r.frames++
}

// row adds row to section sec when it differs from the last written one,
// which it then replaces (the stored row's storage is reused).
func (r *Recorder) row(sec *section, last *[]int64, row []int64) {
	r.scratch = row
	if slices.Equal(row, *last) {
		return
	}
	*last = append((*last)[:0], row...)
	sec.add(row)
}

// conn adds one connection's changed rows to the frame, declaring it
// (again) first if it is new or its paths changed.
func (r *Recorder) conn(c *ConnState) {
	rc := r.conns[c.ConnKey]
	if rc == nil {
		rc = &recConn{n: len(r.order)}
		r.conns[c.ConnKey] = rc
		r.order = append(r.order, rc)
	}
	rc.live = true
	planesChanged := len(rc.decl.Planes) != len(c.Paths)
	for i := 0; !planesChanged && i < len(c.Paths); i++ {
		planesChanged = rc.decl.Planes[i] != c.Paths[i].Plane
	}
	if rc.decl.Type == "" || rc.decl.Peer != c.Peer || rc.decl.Transport != c.Transport || planesChanged {
		decl := record{Type: "conn", N: rc.n, Host: c.Host, ConnID: c.ID, Peer: c.Peer, Transport: c.Transport}
		for _, p := range c.Paths {
			decl.Planes = append(decl.Planes, p.Plane)
		}
		r.write(decl)
		rc.decl = decl
	}
	f := &r.frame
	r.row(&f.conns, &rc.vals, connValsRow(r.scratch[:0], rc.n, r.str(c.State), c))
	if len(rc.paths) != len(c.Paths) {
		rc.paths, rc.routes = make([][]int64, len(c.Paths)), make([][]int64, len(c.Paths))
	}
	for i := range c.Paths {
		p := &c.Paths[i]
		r.row(&f.paths, &rc.paths[i], pathRow(r.scratch[:0], rc.n, i, r.str(p.State), p))
		r.row(&f.routes, &rc.routes[i], routeRow(r.scratch[:0], rc.n, i, p))
	}
}

// frameBuf holds one frame's sections as they are filled.
type frameBuf struct {
	dirs, hosts, conns, paths, routes section
}

func (f *frameBuf) reset() {
	for _, s := range []*section{&f.dirs, &f.hosts, &f.conns, &f.paths, &f.routes} {
		s.b = s.b[:0]
	}
}

// section is a JSON array of integer rows being written: "[1,2],[3,4]".
type section struct{ b []byte }

func (s *section) add(row []int64) {
	if len(s.b) > 0 {
		s.b = append(s.b, ',')
	}
	s.b = append(s.b, '[')
	for i, v := range row {
		if i > 0 {
			s.b = append(s.b, ',')
		}
		s.b = strconv.AppendInt(s.b, v, 10)
	}
	s.b = append(s.b, ']')
}

// close appends the section to b as a field, if it has rows.
func (s *section) close(b []byte, name string) []byte {
	if len(s.b) == 0 {
		return b
	}
	b = append(b, `,"`...)
	b = append(b, name...)
	b = append(b, `":[`...)
	b = append(b, s.b...)
	return append(b, ']')
}

// appendJSONField appends ,"name":v (the rare fields with strings).
func appendJSONField(b []byte, name string, v any) []byte {
	j, err := json.Marshal(v)
	if err != nil {
		return b // maps of int to string and string lists always marshal
	}
	b = append(b, `,"`...)
	b = append(b, name...)
	b = append(b, `":`...)
	return append(b, j...)
}

// lineSplitter receives the trace log's output and writes each line as a
// trace record.
type lineSplitter struct {
	r   *Recorder
	buf []byte
}

func (s *lineSplitter) Write(b []byte) (int, error) {
	s.buf = append(s.buf, b...)
	start := 0
	for {
		i := bytes.IndexByte(s.buf[start:], '\n')
		if i < 0 {
			break
		}
		s.line(s.buf[start : start+i])
		start += i + 1
	}
	s.buf = s.buf[:copy(s.buf, s.buf[start:])]
	return len(b), s.r.err
}

func (s *lineSplitter) flush() {
	if len(s.buf) > 0 {
		s.line(s.buf)
		s.buf = s.buf[:0]
	}
}

func (s *lineSplitter) line(l []byte) {
	line := string(l)
	rec := record{Type: "trace", Line: line}
	if ev, ok := ParseTraceLine(line); ok {
		rec.T = ev.T
	}
	s.r.write(rec)
}
