package softnic

import (
	"bytes"
	"errors"
	"testing"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/metaroce"
	"github.com/mrlab/mrlab/transport/rocev2"
)

func bothProtos() []transport.Protocol {
	return []transport.Protocol{metaroce.NewProtocol(metaroce.Options{}), rocev2.NewProtocol(rocev2.Options{})}
}

// TestTransportPerConnection opens a MetaRoCE and a RoCEv2 connection
// between the same two NICs and moves data on both.
func TestTransportPerConnection(t *testing.T) {
	p := newPair(t, 2, bothProtos)
	for i, kind := range []transport.Kind{transport.MetaRoCE, transport.RoCEv2} {
		src, dst := p.connect(t, 64<<10, transport.AccessLocalWrite|transport.AccessRemoteWrite, kind)
		if src.c.Kind() != kind || dst.c.Kind() != kind {
			t.Fatalf("kinds %v/%v, want %v", src.c.Kind(), dst.c.Kind(), kind)
		}
		for j := range src.buf {
			src.buf[j] = byte(i + j)
		}
		wr := transport.WorkRequest{ID: 1, Op: transport.OpWrite, RemoteAddr: dst.mr.Addr(), RKey: dst.mr.RKey(), NumSGE: 1}
		wr.SGL[0] = src.mr.SGE(0, len(src.buf))
		if err := src.c.PostSend(&wr); err != nil {
			t.Fatal(err)
		}
		if wc := p.waitCompletion(t, src.cq, sim.Millisecond); wc.Status != transport.StatusOK {
			t.Fatalf("%v: %+v", kind, wc)
		}
		if !bytes.Equal(src.buf, dst.buf) {
			t.Errorf("%v: data differs", kind)
		}
	}
}

// TestPathStatistics checks that a MetaRoCE connection sprays over both
// ports and that per-path figures come through.
func TestPathStatistics(t *testing.T) {
	p := newPair(t, 2, bothProtos)
	src, dst := p.connect(t, 256<<10, transport.AccessLocalWrite|transport.AccessRemoteWrite, transport.MetaRoCE)
	wr := transport.WorkRequest{ID: 1, Op: transport.OpWrite, RemoteAddr: dst.mr.Addr(), RKey: dst.mr.RKey(), NumSGE: 1}
	wr.SGL[0] = src.mr.SGE(0, len(src.buf))
	if err := src.c.PostSend(&wr); err != nil {
		t.Fatal(err)
	}
	if wc := p.waitCompletion(t, src.cq, sim.Millisecond); wc.Status != transport.StatusOK {
		t.Fatalf("%+v", wc)
	}
	cs := src.c.Stats()
	if cs.PortTxPackets[0] == 0 || cs.PortTxPackets[1] == 0 {
		t.Errorf("packets per port %v: not sprayed over both planes", cs.PortTxPackets)
	}
	ts := src.c.TransportStats()
	if len(ts.Paths) < 2 {
		t.Fatalf("%d paths", len(ts.Paths))
	}
	var sent uint64
	ports := map[int]bool{}
	for _, ps := range ts.Paths {
		sent += ps.Sent
		if ps.Sent > 0 {
			ports[ps.Port] = true
		}
	}
	if sent < 64 || len(ports) != 2 {
		t.Errorf("paths sent %d packets over ports %v", sent, ports)
	}
	if cs.TxPackets < sent {
		t.Errorf("NIC counted %d packets, paths %d", cs.TxPackets, sent)
	}
	// RoCEv2: one path.
	src2, _ := p.connect(t, 4096, transport.AccessLocalWrite|transport.AccessRemoteWrite, transport.RoCEv2)
	if n := len(src2.c.TransportStats().Paths); n != 1 {
		t.Errorf("rocev2 reports %d paths", n)
	}
	// A poller that keeps its Stats reads either transport without
	// allocating (telemetry samples every connection every interval).
	for _, c := range []*Conn{src.c, src2.c} {
		var s transport.Stats
		c.Transport().ReportStats(&s)
		if allocs := testing.AllocsPerRun(100, func() { c.Transport().ReportStats(&s) }); allocs != 0 {
			t.Errorf("%v: ReportStats allocates %v times", c.Kind(), allocs)
		}
	}
}

// TestClosedConnsRetire closes both ends and checks that the NIC forgets
// the connections but keeps their counters.
func TestClosedConnsRetire(t *testing.T) {
	for _, tc := range transportCases()[1:] {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, 2, tc.protos)
			src, dst := p.connect(t, 64<<10, transport.AccessLocalWrite|transport.AccessRemoteWrite, tc.kind)
			wr := transport.WorkRequest{ID: 1, Op: transport.OpWrite, RemoteAddr: dst.mr.Addr(), RKey: dst.mr.RKey(), NumSGE: 1}
			wr.SGL[0] = src.mr.SGE(0, len(src.buf))
			src.c.PostSend(&wr)
			p.waitCompletion(t, src.cq, sim.Millisecond)
			before := p.a.TransportTotals()
			src.c.Close()
			p.loop.RunUntil(p.loop.Now() + 100*sim.Millisecond)
			if n, m := len(p.a.Conns()), len(p.b.Conns()); n != 0 || m != 0 {
				t.Fatalf("%d and %d connections left after close (states %v %v)", n, m, src.c.State(), dst.c.State())
			}
			if after := p.a.TransportTotals(); after.Retransmits < before.Retransmits || after.Timeouts < before.Timeouts {
				t.Errorf("totals went down: %+v -> %+v", before, after)
			}
			if err := src.c.PostSend(&wr); !errors.Is(err, transport.ErrClosed) {
				t.Errorf("post on a closed connection: %v, want transport.ErrClosed", err)
			}
			if p.pool.Outstanding() != 0 {
				t.Errorf("%d buffers outstanding", p.pool.Outstanding())
			}
		})
	}
}
