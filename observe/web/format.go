package web

import (
	"math"
	"slices"

	"github.com/mrlab/mrlab/internal/sim"
)

// The replay file: JSON lines, one record per line, written by Recorder
// during a sim run and read by ReadReplay. docs/replay-format.md is its
// specification; this file holds its types.
//
// The first line is the header (ReplayHeader). Then, in lab-time order:
//
//	{"type":"str","id":0,"s":"active"}            a string later rows name by id
//	{"type":"conn","n":0,"host":"h0","id":1,...}  a connection end (again when it changes)
//	{"type":"frame","t":10000,"dirs":[[...]],...} one sampling instant: the rows that changed
//	{"type":"trace","t":12301,"line":"t=12.301us h3->h7 conn 4 path 9: ..."}
//	{"type":"fault","t":2000000,"fault":"link p0-leaf0-spine1 down"}
//	{"type":"end","t":1463337}
//
// A frame lists, for each kind of row, only the rows whose values changed
// since the previous frame (the first frame lists them all); a row is
// complete. The state at frame k is every row's latest value at or before
// k. Rows are arrays of integers whose columns the header names.

// ReplayFormat and ReplayVersion identify a replay file. A reader refuses
// other versions: the columns are fixed per version.
const (
	ReplayFormat  = "mrlab-replay"
	ReplayVersion = 1
)

// Column lists of version 1.
var (
	dirColumns  = []string{"dir", "up", "queue_bytes", "tx_bytes", "drops", "marks", "rate_bps"}
	hostColumns = []string{"host", "tx_bytes", "rx_bytes", "tx_packets", "rx_packets", "ce_received", "drops", "retx", "timeouts"}
	connColumns = []string{"conn", "state", "cwnd", "inflight", "srtt_ns", "tx_bytes", "acked_bytes", "retx", "timeouts",
		"entropy_changes", "rate_hint_bps", "peer_id"}
	pathColumns = []string{"conn", "path", "entropy", "state", "cwnd", "inflight", "srtt_ns", "rto_ns", "tx_bytes",
		"acked", "ce_acked", "retx", "timeouts"}
	routeColumns = []string{"conn", "path", "reached", "dirs..."}
)

// ReplayHeader is the first line of a replay file.
type ReplayHeader struct {
	Format  string `json:"format"`
	Version int    `json:"version"`
	// What ran: the lab's name and file, seed, workload and transport.
	Lab       string `json:"lab"`
	LabFile   string `json:"lab_file,omitempty"`
	Seed      uint64 `json:"seed"`
	Workload  string `json:"workload,omitempty"`
	Transport string `json:"transport,omitempty"`
	// Interval is the sampling period of the frames.
	Interval sim.Time `json:"interval_ns"`
	// Faults is the lab file's fault timeline as planned ("2ms link
	// p0-leaf0-spine1 down"); fault records say what fired.
	Faults   []string `json:"faults,omitempty"`
	Topology Topology `json:"topology"`
	// The columns of each kind of row.
	DirColumns   []string `json:"dir_columns"`
	HostColumns  []string `json:"host_columns"`
	ConnColumns  []string `json:"conn_columns"`
	PathColumns  []string `json:"path_columns"`
	RouteColumns []string `json:"route_columns"`
}

// ReplayMeta describes a recorded run for its header.
type ReplayMeta struct {
	Lab, LabFile        string
	Seed                uint64
	Workload, Transport string
	Faults              []string
}

func newHeader(m ReplayMeta, topo Topology, interval sim.Time) ReplayHeader {
	return ReplayHeader{Format: ReplayFormat, Version: ReplayVersion, Lab: m.Lab, LabFile: m.LabFile, Seed: m.Seed,
		Workload: m.Workload, Transport: m.Transport, Interval: interval, Faults: m.Faults, Topology: topo,
		DirColumns: dirColumns, HostColumns: hostColumns, ConnColumns: connColumns, PathColumns: pathColumns,
		RouteColumns: routeColumns}
}

// columnsOK reports whether a header's columns are version 1's.
func (h *ReplayHeader) columnsOK() bool {
	return slices.Equal(h.DirColumns, dirColumns) && slices.Equal(h.HostColumns, hostColumns) &&
		slices.Equal(h.ConnColumns, connColumns) && slices.Equal(h.PathColumns, pathColumns) &&
		slices.Equal(h.RouteColumns, routeColumns)
}

// record is any line after the header; Type says which fields mean
// something.
type record struct {
	Type string   `json:"type"`
	T    sim.Time `json:"t"`

	// "str"
	ID int    `json:"id,omitempty"`
	S  string `json:"s,omitempty"`

	// "conn": connection n is this end. Planes gives each path's plane.
	N         int    `json:"n,omitempty"`
	Host      string `json:"host,omitempty"`
	ConnID    uint32 `json:"conn_id,omitempty"`
	Peer      string `json:"peer,omitempty"`
	Transport string `json:"transport,omitempty"`
	Planes    []int  `json:"planes,omitempty"`

	// "frame"
	Dirs       [][]int64      `json:"dirs,omitempty"`
	Impair     map[int]string `json:"impair,omitempty"`
	SwitchDown *[]string      `json:"switch_down,omitempty"`
	Hosts      [][]int64      `json:"hosts,omitempty"`
	Conns      [][]int64      `json:"conns,omitempty"`
	Gone       []int          `json:"gone,omitempty"`
	Paths      [][]int64      `json:"paths,omitempty"`
	Routes     [][]int64      `json:"routes,omitempty"`

	// "trace"
	Line string `json:"line,omitempty"`

	// "fault"
	Fault string `json:"fault,omitempty"`
	Err   string `json:"error,omitempty"`
}

// Row encodings. A snapshot's values map to integer rows and back; the
// string columns (states) hold ids of "str" records. Each appends to dst
// (the recorder's scratch row) and returns it.

func dirRow(dst []int64, i int, d *DirState) []int64 {
	return append(dst, int64(i), b2i(d.Up), int64(d.Queue), int64(d.TxBytes), int64(d.Drops), int64(d.Marks), int64(math.Round(d.Rate)))
}

func hostRow(dst []int64, i int, h *HostState) []int64 {
	return append(dst, int64(i), int64(h.TxBytes), int64(h.RxBytes), int64(h.TxPackets), int64(h.RxPackets),
		int64(h.CEReceived), int64(h.Drops), int64(h.Retransmits), int64(h.Timeouts))
}

func connValsRow(dst []int64, n int, state int, c *ConnState) []int64 {
	return append(dst, int64(n), int64(state), c.Cwnd, c.InFlight, int64(c.SRTT), int64(c.TxBytes), int64(c.Acked),
		int64(c.Retransmits), int64(c.Timeouts), int64(c.EntropyChanges), int64(math.Round(c.RateHint)), int64(c.PeerID))
}

func pathRow(dst []int64, n, i, state int, p *PathState) []int64 {
	return append(dst, int64(n), int64(i), int64(p.Entropy), int64(state), p.Cwnd, p.InFlight, int64(p.SRTT), int64(p.RTO),
		int64(p.TxBytes), int64(p.Acked), int64(p.CEAcked), int64(p.Retransmits), int64(p.Timeouts))
}

func routeRow(dst []int64, n, i int, p *PathState) []int64 {
	dst = append(dst, int64(n), int64(i), b2i(p.Reached))
	for _, d := range p.Route {
		dst = append(dst, int64(d))
	}
	return dst
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
