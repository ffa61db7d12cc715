package metaroce

import (
	"testing"

	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/metaroce/wire"
)

// TestGrantRevision: an acceptor whose capacity is granted away lowers the
// outstanding first grants to the newcomer's share and sends each of their
// dialers a SYN_ACK with REVISE (spec §9, first flight), so that N
// dialers end with C/N each and the grants in force never add up to more
// than C. A SYN_ACK not yet sent carries the lower share itself. Without
// a way to wake a connection (no SetWake), or with ReviseFirstGrant off,
// the grants stand and a latecomer gets what is left.
func TestGrantRevision(t *testing.T) {
	syn := func(nonce uint64) []byte {
		b := make([]byte, wire.SetupSize+wire.TrailerSize)
		wire.Setup(b).Put(&wire.SetupFields{Common: wire.Common{Type: wire.TypeSyn}, SrcConn: uint32(nonce), Nonce: nonce,
			Paths: 16, Ports: 1, MTU: 4096, MsgWindow: 64, DSNWindow: 64, LineRate: 100000})
		wire.Seal(b, wire.SetupSize)
		return b
	}
	// setupOut is the SYN_ACK c owes now on port 0, if any: its
	// first_share and whether it is a revision.
	setupOut := func(c *Conn) (share uint16, revise, ok bool) {
		b := make([]byte, 9000)
		n, _ := c.TransmitControl(0, 0, b)
		if n == 0 {
			return 0, false, false
		}
		typ, body, err := wire.Parse(b[:n])
		if err != nil || typ != wire.TypeSynAck {
			t.Fatalf("control packet %v, %v; want a SYN_ACK", typ, err)
		}
		s, err := wire.DecodeSetup(body)
		if err != nil {
			t.Fatal(err)
		}
		return s.FirstShare(), wire.Header(body).Flags()&wire.FlagRevise != 0, true
	}
	accept := func(p *Protocol, id uint32, wake func()) *Conn {
		cfg := transport.Config{LocalID: id, Ports: 1, LineRate: 100e9, Memory: newTestMemory(0), Complete: func(transport.Completion) {}}
		tc, err := p.Accept(0, cfg, syn(uint64(id)), transport.RxMeta{})
		if err != nil {
			t.Fatal(err)
		}
		c := tc.(*Conn)
		if wake != nil {
			c.SetWake(wake)
		}
		return c
	}

	t.Run("revised to the share of N", func(t *testing.T) {
		p := NewProtocol(Options{ReviseFirstGrant: true})
		var conns []*Conn
		woken := map[*Conn]int{}
		for k := 1; k <= 5; k++ {
			var c *Conn
			c = accept(p, uint32(40+k), func() { woken[c]++ })
			conns = append(conns, c)
			want := 65535 / k // the share of k, in 65535ths (rounded down)
			var sum int
			for i, d := range conns {
				share, revise, ok := setupOut(d)
				switch {
				case i == k-1 && (!ok || revise):
					t.Fatalf("dialer %d of %d: SYN_ACK %v, revision %v; want its SYN_ACK", i+1, k, ok, revise)
				case i < k-1 && (!ok || !revise):
					t.Fatalf("dialer %d of %d: packet %v, revision %v; want a revision", i+1, k, ok, revise)
				case i < k-1 && woken[d] != k-1-i:
					t.Errorf("dialer %d of %d woken %d times, want %d", i+1, k, woken[d], k-1-i)
				}
				if int(share) < want-1 || int(share) > want {
					t.Errorf("dialer %d of %d: first_share %d, want %d", i+1, k, share, want)
				}
				sum += int(share)
				if _, _, again := setupOut(d); again {
					t.Errorf("dialer %d of %d: a second packet owed", i+1, k)
				}
			}
			if sum > 65535 {
				t.Errorf("%d dialers: grants add up to %d/65535 of the capacity", k, sum)
			}
		}
	})

	t.Run("an unsent SYN_ACK carries the revision", func(t *testing.T) {
		p := NewProtocol(Options{ReviseFirstGrant: true})
		a := accept(p, 41, func() {})
		b := accept(p, 42, func() {}) // a's SYN_ACK has not gone: no revision owed
		if share, revise, ok := setupOut(a); !ok || revise || share != 65535/2 {
			t.Errorf("first dialer: SYN_ACK %v, revision %v, share %d; want its SYN_ACK with %d", ok, revise, share, 65535/2)
		}
		if _, _, again := setupOut(a); again {
			t.Error("first dialer: a revision owed after its SYN_ACK carried the share")
		}
		if share, _, _ := setupOut(b); share != 65535/2 {
			t.Errorf("second dialer: share %d, want %d", share, 65535/2)
		}
	})

	for _, tc := range []struct {
		name   string
		opts   Options
		wakeUp bool
	}{
		{"no wake: the grant stands", Options{ReviseFirstGrant: true}, false},
		{"option off: the grant stands", Options{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := NewProtocol(tc.opts)
			var wake func()
			if tc.wakeUp {
				wake = func() {}
			}
			a := accept(p, 41, wake)
			setupOut(a)
			b := accept(p, 42, wake)
			if _, _, ok := setupOut(a); ok {
				t.Error("first dialer owes a revision")
			}
			if share, _, _ := setupOut(b); share != 0 {
				t.Errorf("second dialer: share %d, want 0 (all granted)", share)
			}
		})
	}
}
