package metaroce

import (
	"bytes"
	"testing"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/transporttest"
)

func TestShakeLossy(t *testing.T) {
	cfg := transporttest.Config{Seed: 5, Ports: 2, Loss: 0.05, Dup: 0.02, Reorder: 0.02, PathSkew: 2 * sim.Microsecond}
	l := newLab(t, cfg, Options{})
	for i := 0; i < 20; i++ {
		if err := l.ca.PostSend(write(uint64(i), uint16(i%3), addrRW+uint64(i)*20000, addrRW+0x80000+uint64(i)*20000, 20000)); err != nil {
			t.Fatal(err)
		}
	}
	if !l.runUntil(100*sim.Millisecond, func() bool { return len(l.ca.Completions) == 20 }) {
		l.dumpTrace()
		t.Fatalf("%d completions; stats %+v", len(l.ca.Completions), metaConn(l.ca).Stats())
	}
	for _, wc := range l.ca.Completions {
		if wc.Status != transport.StatusOK {
			t.Errorf("completion %+v", wc)
		}
	}
	if !bytes.Equal(mem(l.a, keyRW, addrRW, 400000), mem(l.b, keyRW, addrRW+0x80000, 400000)) {
		t.Error("bytes differ")
	}
	t.Logf("a: %+v", metaConn(l.ca).Stats())
	t.Logf("net: %+v", l.net.Stats)
}
