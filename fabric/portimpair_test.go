package fabric_test

import (
	"testing"
	"unsafe"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/sim"
)

// TestPortSize: a port's impairment state (about 750 bytes with the
// impairment's copy in its parameters) lives outside the Port, so a big
// fabric's unimpaired ports do not carry it: 1,784 bytes per Port before.
// The ceiling leaves room for a field or two.
func TestPortSize(t *testing.T) {
	// Ports are allocated one by one: past 1,024 bytes each takes 1,152
	// (the allocator's next size class), 0.8 MB more at 1,024 hosts.
	if n := unsafe.Sizeof(fabric.Port{}); n > 1024 {
		t.Errorf("Port is %d bytes, want at most 1024", n)
	}
}

// TestImpairStateOnlyWhenImpaired: a port holds netem state while its
// impairment is not zero, and reports the impairment installed.
func TestImpairStateOnlyWhenImpaired(t *testing.T) {
	l, p, _ := b2b(t, fabric.LinkParams{Rate: 100e9, Delay: sim.Microsecond, QueueBytes: 1 << 20}, fabric.BuildOptions{})
	if p.HoldsImpairState() || !p.Impairment().IsZero() {
		t.Fatalf("an unimpaired port holds state %v, impairment %+v", p.HoldsImpairState(), p.Impairment())
	}
	imp := fabric.Impairment{Delay: 3 * sim.Microsecond, Loss: fabric.LossModel{Kind: fabric.LossRandom, P: 0.01}}
	if err := l.net.SetImpairment(p.Link(), fabric.Both, imp); err != nil {
		t.Fatal(err)
	}
	if !p.HoldsImpairState() || p.Impairment() != imp {
		t.Fatalf("impaired: holds state %v, impairment %+v, want %+v", p.HoldsImpairState(), p.Impairment(), imp)
	}
	if err := l.net.SetImpairment(p.Link(), fabric.Both, fabric.Impairment{}); err != nil {
		t.Fatal(err)
	}
	if p.HoldsImpairState() || !p.Impairment().IsZero() {
		t.Fatalf("restored: holds state %v, impairment %+v", p.HoldsImpairState(), p.Impairment())
	}
}
