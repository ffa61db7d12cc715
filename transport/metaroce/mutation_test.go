package metaroce

import (
	"testing"

	"github.com/mrlab/mrlab/transport/metaroce/wire"
)

// TestMutationFaults: each value-altering fault changes only what its rule
// names, and only when planted; a Mutation without it (and the engine's
// nil Faults) leaves the value as the spec has it.
func TestMutationFaults(t *testing.T) {
	sack := [wire.SACKWords]uint64{1<<63 | 1, 1, 0, 1 << 63}
	tests := []struct {
		name string
		m    Mutation
		ack  wire.PathAck
		echo uint32
		at   uint64
		read uint32 // offset of a resent chunk at 8192 of 4096 bytes
	}{
		{"none", 0, wire.PathAck{Cum: 7, SACK: sack}, 100, 1000 + 5, 8192},
		{"others", MutIgnoreECN | MutIgnoreCRC, wire.PathAck{Cum: 7, SACK: sack}, 100, 1000 + 5, 8192},
		{"cum-off-by-one", MutCumOffByOne, wire.PathAck{Cum: 8, SACK: sack}, 100, 1005, 8192},
		{"sack-first-word", MutSACKFirstWord, wire.PathAck{Cum: 7, SACK: [wire.SACKWords]uint64{1<<63 | 1}}, 100, 1005, 8192},
		{"sack-off-by-one", MutSACKOffByOne, wire.PathAck{Cum: 7, SACK: [wire.SACKWords]uint64{2, 2, 1, 0}}, 100, 1005, 8192},
		{"no-syn-echo", MutNoSynEcho, wire.PathAck{Cum: 7, SACK: sack}, 100 + 12345, 1005, 8192},
		{"place-offset", MutPlaceOffset, wire.PathAck{Cum: 7, SACK: sack}, 100, 1006, 8192},
		{"read-retx-stale", MutReadRetxStale, wire.PathAck{Cum: 7, SACK: sack}, 100, 1005, 4096},
	}
	for _, tc := range tests {
		if a := tc.m.Ack(wire.PathAck{Cum: 7, SACK: sack}); a != tc.ack {
			t.Errorf("%s: Ack gives %+v, want %+v", tc.name, a, tc.ack)
		}
		if got := tc.m.SynEcho(100); got != tc.echo {
			t.Errorf("%s: SynEcho(100) = %d, want %d", tc.name, got, tc.echo)
		}
		if got := tc.m.PlaceAt(1000, 5); got != tc.at {
			t.Errorf("%s: PlaceAt(1000, 5) = %d, want %d", tc.name, got, tc.at)
		}
		if got := tc.m.ReadOffset(8192, 4096, true); got != tc.read {
			t.Errorf("%s: ReadOffset(8192, 4096, resent) = %d, want %d", tc.name, got, tc.read)
		}
		if got := tc.m.ReadOffset(8192, 4096, false); got != 8192 {
			t.Errorf("%s: ReadOffset of a first transmission = %d, want 8192", tc.name, got)
		}
	}
}

// TestNilFaults: a connection without planted faults breaks no rule and
// passes values through unchanged.
func TestNilFaults(t *testing.T) {
	c := &Conn{opts: &Options{}}
	for _, nm := range Mutations() {
		if c.mutated(nm.M) {
			t.Errorf("nil Faults breaks %s", nm.Name)
		}
	}
	if got := c.placeAt(1000, 5); got != 1005 {
		t.Errorf("placeAt = %d, want 1005", got)
	}
	if got := c.readOffset(8192, 4096, true); got != 8192 {
		t.Errorf("readOffset = %d, want 8192", got)
	}
	a := wire.PathAck{Cum: 7, SACK: [wire.SACKWords]uint64{1, 2, 3, 4}}
	c.mutateAck(&a)
	if a.Cum != 7 || a.SACK != [wire.SACKWords]uint64{1, 2, 3, 4} {
		t.Errorf("mutateAck changed the record: %+v", a)
	}
	c.opts.Faults = MutPlaceOffset
	if !c.mutated(MutPlaceOffset) || c.mutated(MutIgnoreECN) || c.placeAt(1000, 5) != 1006 {
		t.Error("a planted Mutation is not consulted")
	}
}
