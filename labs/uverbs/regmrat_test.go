package uverbs_test

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/mrlab/mrlab/internal/verbsabi"
	"github.com/mrlab/mrlab/labs/uverbs/uverbstest"
)

// TestRegMRAt: REG_MR_AT registers any byte range of a memfd at the
// address the client names (libmrlab-ibverbs registers a buffer at its own
// virtual address); REG_MR still wants a page-aligned offset; ranges that
// wrap the address space or pass the memfd's end are refused.
func TestRegMRAt(t *testing.T) {
	lab := uverbstest.Start(t, uverbstest.Options{})
	r := dialRaw(t, lab.Endpoints[0])
	r.hello()
	r.send(verbsabi.AppendRequest(nil, &verbsabi.Request{Op: verbsabi.OpAllocPD, Seq: 2}))
	pd, ok := r.recv()
	if !ok || pd.Code != verbsabi.CodeOK {
		t.Fatalf("ALLOC_PD: %+v", pd)
	}
	memfd, err := verbsabi.CreateMemfd("t", 3*4096, false)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(memfd)
	const va = 0x7f12_3456_7010
	tests := []struct {
		name   string
		op     verbsabi.Op
		off    uint64
		length uint64
		iova   uint64
		want   verbsabi.Code
	}{
		{"mid-page start", verbsabi.OpRegMRAt, 0x1010, 5000, va, verbsabi.CodeOK},
		{"whole memfd", verbsabi.OpRegMRAt, 0, 3 * 4096, 4096, verbsabi.CodeOK},
		{"wraps the address space", verbsabi.OpRegMRAt, 0, 100, ^uint64(0) - 10, verbsabi.CodeInvalid},
		{"past the memfd's end", verbsabi.OpRegMRAt, 0x2010, 4096, va, verbsabi.CodeBadMemory},
		{"REG_MR mid-page", verbsabi.OpRegMR, 0x1010, 100, 0, verbsabi.CodeInvalid},
	}
	for i, tc := range tests {
		seq := uint32(10 + i)
		r.send(verbsabi.AppendRequest(nil, &verbsabi.Request{Op: tc.op, Seq: seq, PD: pd.Handle,
			Access: verbsabi.AccessLocalWrite, Offset: tc.off, Length: tc.length, IOVA: tc.iova}), memfd)
		rep, ok := r.recv()
		if !ok || rep.Seq != seq || rep.Code != tc.want {
			t.Errorf("%s: reply %+v, want code %v", tc.name, rep, tc.want)
			continue
		}
		if tc.want == verbsabi.CodeOK && (rep.MRAddr != tc.iova || rep.LKey == 0) {
			t.Errorf("%s: region at %#x key %#x, want at %#x", tc.name, rep.MRAddr, rep.LKey, tc.iova)
		}
	}
}
