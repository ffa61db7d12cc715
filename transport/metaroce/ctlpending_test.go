package metaroce

import (
	"testing"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/metaroce/wire"
	"github.com/mrlab/mrlab/transport/transporttest"
)

// pendCheck asks ControlPending before every Transmit the test host makes
// and checks the answer against what Transmit sends: Transmit sends the
// connection's control first (transmitCtl, TransmitControl's whole
// work), so ControlPending(port) must be true exactly when Transmit's
// packet is a control packet.
type pendCheck struct {
	*Conn
	t             *testing.T
	idle, pending int // asks with ControlPending false, true
	quiet         int // asks with TransmitPending false
	types         map[wire.Type]int
}

func (p *pendCheck) Transmit(now sim.Time, port int, b []byte) (int, transport.TxMeta) {
	pend, may := p.ControlPending(port), p.TransmitPending(port)
	d, st := p.Deadline(), p.State()
	k, meta := p.Conn.Transmit(now, port, b)
	if !may {
		p.quiet++
		if k != 0 || p.Deadline() != d || p.State() != st {
			p.t.Errorf("%v conn %d port %d: TransmitPending false, but Transmit sent %d bytes, deadline %v -> %v, state %v -> %v",
				now, p.id, port, k, d, p.Deadline(), st, p.State())
		}
	}
	var typ wire.Type
	if k > 0 {
		typ = wire.Header(b).Type()
		p.types[typ]++
	}
	ctl := k > 0 && isControlType(typ)
	if pend != ctl {
		p.t.Errorf("%v conn %d port %d: ControlPending %v, but Transmit sent %d bytes of %v",
			now, p.id, port, pend, k, typ)
	}
	if pend {
		p.pending++
	} else {
		p.idle++
	}
	return k, meta
}

func isControlType(t wire.Type) bool {
	switch t {
	case wire.TypeAck, wire.TypeNak, wire.TypeSyn, wire.TypeSynAck, wire.TypeEst, wire.TypeClose, wire.TypeCloseAck:
		return true
	}
	return false
}

// TestControlPending: ControlPending says exactly when TransmitControl
// has a packet (transport.ControlPender: the NIC skips the ask when it
// says no), and TransmitPending is false only when Transmit sends and
// changes nothing, over WRITEs both ways on two ports with loss, READs (their
// responses are data, not control), SENDs refused with RNR NAKs until a
// receive is posted, and a close.
func TestControlPending(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		l := newLab(t, transporttest.Config{Seed: seed, Ports: 2, Loss: 0.03, PathSkew: 2 * sim.Microsecond}, Options{})
		checks := []*pendCheck{}
		for _, c := range []*transporttest.Conn{l.ca, l.cb} {
			p := &pendCheck{Conn: metaConn(c), t: t, types: map[wire.Type]int{}}
			c.T = p
			checks = append(checks, p)
		}
		// b receives only until the sixth request (TransmitPending false
		// for it), then both ends send.
		for i := range 12 {
			from := l.ca
			if i > 5 && i%2 == 1 {
				from = l.cb
			}
			if i == 6 {
				l.run(100 * sim.Microsecond)
			}
			wr := write(uint64(i+1), uint16(i%3), addrRW, addrRW+0x80000+uint64(i)*40000, 40000)
			if i > 5 && i%4 == 3 {
				wr.Op = transport.OpRead
				wr.SGL[0].LKey, wr.SGL[0].Addr = keyRecv, addrRcv+uint64(i)*40000
			}
			if err := from.PostSend(wr); err != nil {
				t.Fatal(err)
			}
		}
		// A SEND with no receive posted yet draws RNR NAKs until one is.
		if err := l.ca.PostSend(send(100, 1, addrRW, 20000)); err != nil {
			t.Fatal(err)
		}
		l.run(50 * sim.Microsecond)
		if err := l.cb.PostRecv(recvWR(101, addrRcv+0x80000, 65536)); err != nil {
			t.Fatal(err)
		}
		l.run(2 * sim.Millisecond)
		l.ca.Close()
		l.run(5 * sim.Millisecond)
		for _, p := range checks {
			if p.idle == 0 || p.pending == 0 || p.types[wire.TypeAck] == 0 {
				t.Errorf("seed %d conn %d: %d asks with nothing pending, %d with control pending, packets %v: the run does not exercise both answers",
					seed, p.id, p.idle, p.pending, p.types)
			}
		}
		if checks[1].quiet == 0 || checks[0].quiet != 0 {
			t.Errorf("seed %d: %d and %d asks with TransmitPending false, want some for the receiver only", seed, checks[0].quiet, checks[1].quiet)
		}
		if checks[1].types[wire.TypeNak] == 0 || checks[0].types[wire.TypeClose] == 0 {
			t.Errorf("seed %d: packets %v and %v: no NAK or no CLOSE to check", seed, checks[0].types, checks[1].types)
		}
		if t.Failed() {
			l.dumpTrace()
			return
		}
	}
}

// A revision owed (Options.ReviseFirstGrant) is control pending on its
// port, so the NIC asks for it: the answer's fast path for "nothing owed"
// once left it out, and an incast's first grants went unrevised until
// other control happened to be asked for.
func TestControlPendingRevision(t *testing.T) {
	l := newLab(t, transporttest.Config{Seed: 1, Ports: 2}, Options{ReviseFirstGrant: true})
	l.run(100 * sim.Microsecond)
	b := metaConn(l.cb)
	if b.ControlPending(0) || b.ControlPending(1) {
		t.Fatal("an idle connection says it has control to send")
	}
	b.ctl.revise, b.ctl.port = true, 1
	if !b.ControlPending(1) {
		t.Error("a revision owed on port 1: ControlPending(1) false, want true")
	}
}
