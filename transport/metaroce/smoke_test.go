package metaroce

import (
	"bytes"
	"testing"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/transporttest"
)

func TestSmokeWrite(t *testing.T) {
	l := newLab(t, transporttest.Config{Seed: 1}, Options{})
	if err := l.ca.PostSend(write(7, 0, addrRW, addrRW+0x80000, 65536)); err != nil {
		t.Fatal(err)
	}
	if !l.runUntil(sim.Millisecond, func() bool { return len(l.ca.Completions) == 1 }) {
		l.dumpTrace()
		t.Fatalf("no completion; stats %+v", metaConn(l.ca).Stats())
	}
	wc := l.ca.Completions[0]
	if wc.Status != transport.StatusOK || wc.ID != 7 || wc.Bytes != 65536 {
		t.Errorf("completion %+v", wc)
	}
	if !bytes.Equal(mem(l.a, keyRW, addrRW, 65536), mem(l.b, keyRW, addrRW+0x80000, 65536)) {
		t.Error("bytes differ")
	}
	t.Logf("a: %+v", metaConn(l.ca).Stats())
	t.Logf("b: %+v", metaConn(l.cb).Stats())
}
