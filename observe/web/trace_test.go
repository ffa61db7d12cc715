package web

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/mrlab/mrlab/internal/sim"
)

func TestParseTraceLine(t *testing.T) {
	us := sim.Microsecond
	for _, tc := range []struct {
		line string
		want TraceEvent
		ok   bool
	}{
		{"t=12.301us h3->h7 conn 4 path 9: SACK hole psn 1834, retransmit",
			TraceEvent{T: 12301, Host: "h3", Peer: "h7", Conn: 4, HasConn: true, Path: 9, PSN: 1834, Kind: "sack-hole"}, true},
		{"t=1.04324ms h2->h6 conn 1 path 10 entropy 50804 -> 65288 after timeout (gen 1, 15 chunks moved)",
			TraceEvent{T: 1043240, Host: "h2", Peer: "h6", Conn: 1, HasConn: true, Path: 10, PSN: -1, Kind: "entropy"}, true},
		{"t=20us h0->h1 conn 2 path 3: tail-loss probe resends dsn 7 (psn 12)",
			TraceEvent{T: 20 * us, Host: "h0", Peer: "h1", Conn: 2, HasConn: true, Path: 3, PSN: 12, Kind: "probe"}, true},
		{"t=20us h0->h1 conn 2 path 3: retransmit psn 11 (dsn 6)",
			TraceEvent{T: 20 * us, Host: "h0", Peer: "h1", Conn: 2, HasConn: true, Path: 3, PSN: 11, Kind: "retx"}, true},
		{"t=5us h0 conn 2: rate hint 0.000 Gb/s -> 190.000 Gb/s",
			TraceEvent{T: 5 * us, Host: "h0", Conn: 2, HasConn: true, Path: -1, PSN: -1, Kind: "hint"}, true},
		{"t=9us h4->h0 conn 3: established: peer conn 1, 16 paths out, 16 in, mss 4096",
			TraceEvent{T: 9 * us, Host: "h4", Peer: "h0", Conn: 3, HasConn: true, Path: -1, PSN: -1, Kind: "setup"}, true},
		{"t=30us h0->h4 conn 3 path 2: RTO (2 in a row), rto now 40us",
			TraceEvent{T: 30 * us, Host: "h0", Peer: "h4", Conn: 3, HasConn: true, Path: 2, PSN: -1, Kind: "rto"}, true},
		{"t=130.2us fabric: drop (queue-full) at p0-leaf0-spine1:AtoB h0->h1 conn 1 path 2 psn 1834 WRITE RETX",
			TraceEvent{T: 130200, Host: "h0", Peer: "h1", Conn: 1, HasConn: true, Path: 2, PSN: 1834, Kind: "drop", Fabric: true,
				Link: "p0-leaf0-spine1:AtoB"}, true},
		{"t=131us fabric: drop (black-hole) at p0-spine1 h4->h0 conn 3 path 5 cack 77 ACK",
			TraceEvent{T: 131 * us, Host: "h4", Peer: "h0", Conn: 3, HasConn: true, Path: 5, PSN: 77, Kind: "drop", Fabric: true,
				Link: "p0-spine1", Ack: true}, true},
		{"t=1us fabric: mark at h0-p0:AtoB h0->h1 udp 5000->4791",
			TraceEvent{T: us, Host: "h0", Peer: "h1", Path: -1, PSN: -1, Kind: "mark", Fabric: true, Link: "h0-p0:AtoB"}, true},
		{"t=1ms fault: link p0-leaf0-spine1 down", TraceEvent{T: sim.Millisecond, Path: -1, PSN: -1, Kind: "note"}, true},
		{"hello", TraceEvent{}, false},
		{"t=banana h0 conn 1: x", TraceEvent{}, false},
		{"t=1us", TraceEvent{}, false},
	} {
		got, ok := ParseTraceLine(tc.line)
		if ok != tc.ok {
			t.Errorf("%q: ok %v, want %v", tc.line, ok, tc.ok)
			continue
		}
		if !ok {
			continue
		}
		if diff := cmp.Diff(tc.want, got, cmpopts.IgnoreFields(TraceEvent{}, "Text"), cmp.AllowUnexported(TraceEvent{})); diff != "" {
			t.Errorf("%q (-want +got):\n%s", tc.line, diff)
		}
	}
}

// A connection's ladder: its own and its peer's decisions about it, and
// the fabric's events on packets between them to either end's id.
func TestInvolves(t *testing.T) {
	c := &ConnState{ConnKey: ConnKey{"h0", 3}, Peer: "h4", PeerID: 7}
	for _, tc := range []struct {
		ev   TraceEvent
		want bool
	}{
		{TraceEvent{Host: "h0", Conn: 3, HasConn: true}, true},
		{TraceEvent{Host: "h0", Conn: 4, HasConn: true}, false},
		{TraceEvent{Host: "h4", Conn: 7, HasConn: true}, true},
		{TraceEvent{Host: "h4", Conn: 3, HasConn: true}, false},
		{TraceEvent{Fabric: true, Host: "h0", Peer: "h4", Conn: 7, HasConn: true}, true},  // data to the peer
		{TraceEvent{Fabric: true, Host: "h0", Peer: "h4", Conn: 8, HasConn: true}, false}, // another connection
		{TraceEvent{Fabric: true, Host: "h4", Peer: "h0", Conn: 3, HasConn: true}, true},  // an ACK back
		{TraceEvent{Fabric: true, Host: "h4", Peer: "h1", Conn: 3, HasConn: true}, false},
		{TraceEvent{Fabric: true, Host: "h0", Peer: "h4"}, true}, // no connection named
	} {
		if got := c.Involves(&tc.ev); got != tc.want {
			t.Errorf("%+v: %v, want %v", tc.ev, got, tc.want)
		}
	}
}
