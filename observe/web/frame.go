package web

import (
	"cmp"
	"slices"

	"github.com/mrlab/mrlab/internal/sim"
)

// Frame is what the page draws at one instant: per link direction its
// utilisation, queue, drops and marks and state; the hosts' NIC figures;
// the busiest connections; the selected connection in detail; the fault
// timeline so far. Rates and the drop and mark counts are over the time
// since the frame the page drew before (or the previous sample).
type Frame struct {
	T     sim.Time `json:"t"`
	Index int      `json:"i"` // the replay's frame number; -1 live
	// Util is each direction's utilisation in per mille of its rate.
	Util  []int    `json:"util"`
	Queue []int    `json:"queue"` // bytes
	Drops []uint64 `json:"drops"`
	Marks []uint64 `json:"marks"`
	// State has one letter per direction: u (up), d (down), i (up and
	// impaired; Impair has the netem string).
	State      string         `json:"state"`
	Impair     map[int]string `json:"impair,omitempty"`
	SwitchDown []string       `json:"switch_down,omitempty"`
	Hosts      []HostRow      `json:"hosts"`
	Conns      int            `json:"conns"`
	Top        []ConnRow      `json:"top"`
	Sel        *ConnDetail    `json:"sel,omitempty"`
	Faults     []FaultEvent   `json:"faults"`
}

// HostRow is one host in the side panel.
type HostRow struct {
	HostState
	TxRate float64 `json:"tx_bps"`
	RxRate float64 `json:"rx_bps"`
}

// ConnRow is a connection in a list.
type ConnRow struct {
	ConnKey
	Peer      string   `json:"peer"`
	Transport string   `json:"transport"`
	State     string   `json:"state"`
	Rate      float64  `json:"rate_bps"` // send rate
	SRTT      sim.Time `json:"srtt_ns"`
	Retx      uint64   `json:"retx"`
	Timeouts  uint64   `json:"timeouts"`
	Paths     int      `json:"paths"`
}

// ConnDetail is the selected connection: its paths with their routes,
// their recent history for sparklines, and its recent trace events for
// the ladder diagram.
type ConnDetail struct {
	ConnRow
	PeerID   uint32       `json:"peer_id"`
	Cwnd     int64        `json:"cwnd"`
	InFlight int64        `json:"inflight"`
	RateHint float64      `json:"rate_hint_bps"`
	Found    bool         `json:"found"` // false: the connection is not open at this time
	PathRows []PathRow    `json:"path_rows"`
	Hist     *History     `json:"hist,omitempty"`
	Ladder   []TraceEvent `json:"ladder"`
}

// PathRow is one path of the selected connection.
type PathRow struct {
	Path     int      `json:"path"`
	Plane    int      `json:"plane"`
	Entropy  uint16   `json:"entropy"`
	State    string   `json:"state"`
	Cwnd     int64    `json:"cwnd"`
	InFlight int64    `json:"inflight"`
	SRTT     sim.Time `json:"srtt_ns"`
	Rate     float64  `json:"rate_bps"`
	Retx     uint64   `json:"retx"`
	Timeouts uint64   `json:"timeouts"`
	Route    []int    `json:"route"`
	Reached  bool     `json:"reached"`
}

// History is the selected connection's recent past, oldest first: per
// path, cwnd (bytes), send rate (bit/s) and smoothed RTT (ns) at each time.
type History struct {
	T    []sim.Time  `json:"t"`
	Cwnd [][]int64   `json:"cwnd"`
	Rate [][]float64 `json:"rate"`
	RTT  [][]int64   `json:"rtt"`
}

// FaultEvent is a fault on the timeline: applied at T, described as the
// CLI spells it ("link p0-leaf0-spine1 down"), and its error if it failed.
type FaultEvent struct {
	T     sim.Time `json:"t"`
	Fault string   `json:"fault"`
	Err   string   `json:"error,omitempty"`
}

// Frame limits.
const (
	topConns   = 12 // busiest connections listed
	histLen    = 60 // samples in the sparklines
	ladderLen  = 80 // trace events in the ladder
	maxUtilPer = 1000
)

// frameInput is what a frame is built from: two snapshots (the previous
// may be nil) and the selected connection's history and trace events.
type frameInput struct {
	prev, cur *Snapshot
	index     int
	sel       *ConnKey
	// hist is the selected connection's state at earlier snapshots,
	// oldest first, ending with cur's; histT their times.
	hist   []*ConnState
	histT  []sim.Time
	ladder []TraceEvent
	faults []FaultEvent
}

// buildFrame turns snapshots into a frame.
func buildFrame(in *frameInput) *Frame {
	cur, prev := in.cur, in.prev
	f := &Frame{T: cur.T, Index: in.index, Faults: in.faults, SwitchDown: cur.SwitchDown}
	if f.Faults == nil {
		f.Faults = []FaultEvent{}
	}
	dt := 0.0
	if prev != nil && cur.T > prev.T {
		dt = (cur.T - prev.T).Seconds()
	}
	n := len(cur.Dirs)
	f.Util, f.Queue = make([]int, n), make([]int, n)
	f.Drops, f.Marks = make([]uint64, n), make([]uint64, n)
	state := make([]byte, n)
	for i, d := range cur.Dirs {
		f.Queue[i] = d.Queue
		switch {
		case !d.Up:
			state[i] = 'd'
		case d.Impair != "":
			state[i] = 'i'
		default:
			state[i] = 'u'
		}
		if d.Impair != "" {
			if f.Impair == nil {
				f.Impair = map[int]string{}
			}
			f.Impair[i] = d.Impair
		}
		if prev == nil || i >= len(prev.Dirs) {
			continue
		}
		p := prev.Dirs[i]
		f.Drops[i] = sub(d.Drops, p.Drops)
		f.Marks[i] = sub(d.Marks, p.Marks)
		if dt > 0 && d.Rate > 0 {
			u := float64(sub(d.TxBytes, p.TxBytes)) * 8 / dt / d.Rate
			f.Util[i] = min(int(u*1000+0.5), maxUtilPer)
		}
	}
	f.State = string(state)

	f.Hosts = make([]HostRow, len(cur.Hosts))
	for i, h := range cur.Hosts {
		f.Hosts[i].HostState = h
		if dt > 0 && prev != nil && i < len(prev.Hosts) {
			f.Hosts[i].TxRate = float64(sub(h.TxBytes, prev.Hosts[i].TxBytes)) * 8 / dt
			f.Hosts[i].RxRate = float64(sub(h.RxBytes, prev.Hosts[i].RxBytes)) * 8 / dt
		}
	}

	f.Conns = len(cur.Conns)
	rows := connRows(prev, cur, "")
	slices.SortStableFunc(rows, func(a, b ConnRow) int { return cmp.Compare(b.Rate, a.Rate) })
	for _, r := range rows {
		if len(f.Top) == topConns || r.Rate <= 0 {
			break
		}
		f.Top = append(f.Top, r)
	}
	if f.Top == nil {
		f.Top = []ConnRow{}
	}
	if in.sel != nil {
		f.Sel = connDetail(in, dt)
	}
	return f
}

// connRows lists the connections of cur (of one host, unless host is
// ""), with send rates against prev.
func connRows(prev, cur *Snapshot, host string) []ConnRow {
	var before map[ConnKey]*ConnState
	dt := 0.0
	if prev != nil && cur.T > prev.T {
		dt = (cur.T - prev.T).Seconds()
		before = make(map[ConnKey]*ConnState, len(prev.Conns))
		for i := range prev.Conns {
			before[prev.Conns[i].ConnKey] = &prev.Conns[i]
		}
	}
	var rows []ConnRow
	for i := range cur.Conns {
		c := &cur.Conns[i]
		if host != "" && c.Host != host {
			continue
		}
		r := connRow(c)
		if p := before[c.ConnKey]; p != nil && dt > 0 {
			r.Rate = float64(sub(c.TxBytes, p.TxBytes)) * 8 / dt
		}
		rows = append(rows, r)
	}
	return rows
}

func connRow(c *ConnState) ConnRow {
	return ConnRow{ConnKey: c.ConnKey, Peer: c.Peer, Transport: c.Transport, State: c.State, SRTT: c.SRTT,
		Retx: c.Retransmits, Timeouts: c.Timeouts, Paths: c.NumPaths}
}

// connDetail builds the selected connection's detail.
func connDetail(in *frameInput, dt float64) *ConnDetail {
	key := *in.sel
	d := &ConnDetail{ConnRow: ConnRow{ConnKey: key}, Ladder: in.ladder, PathRows: []PathRow{}}
	if d.Ladder == nil {
		d.Ladder = []TraceEvent{}
	}
	c := findConn(in.cur, key)
	if c == nil {
		return d
	}
	d.Found = true
	d.ConnRow = connRow(c)
	d.PeerID, d.Cwnd, d.InFlight, d.RateHint = c.PeerID, c.Cwnd, c.InFlight, c.RateHint
	var pc *ConnState
	if in.prev != nil {
		pc = findConn(in.prev, key)
	}
	if pc != nil && dt > 0 {
		d.Rate = float64(sub(c.TxBytes, pc.TxBytes)) * 8 / dt
	}
	for i, p := range c.Paths {
		r := PathRow{Path: i, Plane: p.Plane, Entropy: p.Entropy, State: p.State, Cwnd: p.Cwnd, InFlight: p.InFlight,
			SRTT: p.SRTT, Retx: p.Retransmits, Timeouts: p.Timeouts, Route: p.Route, Reached: p.Reached}
		if r.Route == nil {
			r.Route = []int{}
		}
		if pc != nil && dt > 0 && i < len(pc.Paths) {
			r.Rate = float64(sub(p.TxBytes, pc.Paths[i].TxBytes)) * 8 / dt
		}
		d.PathRows = append(d.PathRows, r)
	}
	if len(in.hist) > 0 {
		d.Hist = history(in.hist, in.histT, len(c.Paths))
	}
	return d
}

// history turns a connection's past states into per-path series.
func history(hist []*ConnState, times []sim.Time, paths int) *History {
	h := &History{T: times, Cwnd: make([][]int64, paths), Rate: make([][]float64, paths), RTT: make([][]int64, paths)}
	for p := range paths {
		h.Cwnd[p] = make([]int64, len(hist))
		h.Rate[p] = make([]float64, len(hist))
		h.RTT[p] = make([]int64, len(hist))
		for k, c := range hist {
			if c == nil || p >= len(c.Paths) {
				continue
			}
			h.Cwnd[p][k] = c.Paths[p].Cwnd
			h.RTT[p][k] = int64(c.Paths[p].SRTT)
			if k > 0 && hist[k-1] != nil && p < len(hist[k-1].Paths) && times[k] > times[k-1] {
				h.Rate[p][k] = float64(sub(c.Paths[p].TxBytes, hist[k-1].Paths[p].TxBytes)) * 8 / (times[k] - times[k-1]).Seconds()
			}
		}
	}
	return h
}

func findConn(s *Snapshot, key ConnKey) *ConnState {
	for i := range s.Conns {
		if s.Conns[i].ConnKey == key {
			return &s.Conns[i]
		}
	}
	return nil
}

// sub is a counter difference that never wraps (a counter that went back
// means a restarted series: count from zero).
func sub(a, b uint64) uint64 {
	if a < b {
		return a
	}
	return a - b
}

// lastEvents returns the last n events of evs (sorted by time) at or
// before t that involve c.
func lastEvents(evs []TraceEvent, c *ConnState, t sim.Time, n int) []TraceEvent {
	end, _ := slices.BinarySearchFunc(evs, t+1, func(e TraceEvent, t sim.Time) int { return cmp.Compare(e.T, t) })
	var out []TraceEvent
	for i := end - 1; i >= 0 && len(out) < n; i-- {
		if c.Involves(&evs[i]) {
			out = append(out, evs[i])
		}
	}
	slices.Reverse(out)
	return out
}
