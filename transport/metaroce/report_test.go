package metaroce

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/transporttest"
)

// TestReportCountersMatchReportStats: the counters ReportCounters gives
// without walking the paths are ReportStats' own, on both ends of a lossy,
// duplicating, ECN-marking run (so none of them is zero), and the rest is
// zero.
func TestReportCountersMatchReportStats(t *testing.T) {
	l := newLab(t, transporttest.Config{Seed: 3, Loss: 0.02, Dup: 0.02, LinkRate: 100e9, QueueBytes: 64 << 10, ECNThreshold: 8 << 10}, Options{Paths: 8})
	for i := range 8 {
		if err := l.ca.PostSend(write(uint64(i), 0, addrRW, addrRW+0x80000, 256<<10)); err != nil {
			t.Fatal(err)
		}
	}
	if !l.runUntil(100*sim.Millisecond, func() bool { return len(l.ca.Completions) == 8 }) {
		t.Fatalf("%d of 8 completions", len(l.ca.Completions))
	}
	var sent, placed uint64
	for _, c := range []*Conn{metaConn(l.ca), metaConn(l.cb)} {
		var full, cnt transport.Stats
		c.ReportStats(&full)
		cnt.Paths = full.Paths // storage kept, emptied
		c.ReportCounters(&cnt)
		want := transport.Stats{
			TxBytes: full.TxBytes, BytesPlaced: full.BytesPlaced, Retransmits: full.Retransmits,
			Timeouts: full.Timeouts, ECNEchoes: full.ECNEchoes, EntropyChanges: full.EntropyChanges,
			ChecksumDrops: full.ChecksumDrops, Duplicates: full.Duplicates,
		}
		if len(cnt.Paths) != 0 || cap(cnt.Paths) != cap(full.Paths) {
			t.Errorf("Paths len %d cap %d, want 0 and %d", len(cnt.Paths), cap(cnt.Paths), cap(full.Paths))
		}
		cnt.Paths = nil
		if diff := cmp.Diff(want, cnt); diff != "" {
			t.Errorf("ReportCounters differs from ReportStats (-stats +counters):\n%s", diff)
		}
		sent, placed = max(sent, full.Retransmits), max(placed, full.Duplicates)
	}
	if sent == 0 || placed == 0 {
		t.Errorf("the run had %d retransmits and %d duplicates at most: the test compares zeros", sent, placed)
	}
}
