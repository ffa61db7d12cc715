package softnic

import (
	"testing"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
)

// TestListenersByService dials three services on one NIC, with both real
// transports: two with listeners, each of which gets exactly its own
// connection, and one without, whose request is a counted drop.
func TestListenersByService(t *testing.T) {
	for _, tc := range transportCases()[1:] {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, 1, tc.protos)
			got := map[uint16][]*Conn{}
			for _, svc := range []uint16{7, 18515} {
				pd := p.b.AllocPD()
				if err := p.b.Listen(&ListenOptions{ConnOptions: ConnOptions{PD: pd, Service: svc},
					OnConn: func(c *Conn) { got[svc] = append(got[svc], c) }}); err != nil {
					t.Fatal(err)
				}
			}
			pd := p.a.AllocPD()
			dial := func(svc uint16) *Conn {
				c, err := p.a.Dial(addrB, ConnOptions{Transport: tc.kind, PD: pd, Service: svc})
				if err != nil {
					t.Fatal(err)
				}
				return c
			}
			c7, c18515, c9 := dial(7), dial(18515), dial(9)
			p.loop.RunUntil(p.loop.Now() + sim.Millisecond)
			for svc, c := range map[uint16]*Conn{7: c7, 18515: c18515} {
				if c.State() != transport.StateEstablished {
					t.Errorf("service %d: dialer %v", svc, c.State())
				}
				if len(got[svc]) != 1 || got[svc][0].Service() != svc || got[svc][0].Peer() != addrA {
					t.Errorf("service %d: accepted %v", svc, got[svc])
				}
			}
			if c9.State() == transport.StateEstablished {
				t.Error("service 9 has no listener but its connection was established")
			}
			if n := p.b.Stats().Drops[DropNoListener]; n == 0 {
				t.Error("request for service 9 not counted as DropNoListener")
			}
			// Stopping one service leaves the other.
			p.b.StopListening(7)
			again7, again18515 := dial(7), dial(18515)
			p.loop.RunUntil(p.loop.Now() + sim.Millisecond)
			if again7.State() == transport.StateEstablished || len(got[7]) != 1 {
				t.Errorf("service 7 accepted after StopListening: %v, %d accepted", again7.State(), len(got[7]))
			}
			if again18515.State() != transport.StateEstablished || len(got[18515]) != 2 {
				t.Errorf("service 18515 after stopping 7: %v, %d accepted", again18515.State(), len(got[18515]))
			}
		})
	}
}

// TestRegionSlotsReused registers and deregisters many regions: the table
// holds the live regions only, and a key of a deregistered region never
// names a later region.
func TestRegionSlotsReused(t *testing.T) {
	p := newPair(t, 1, toyProtos)
	pd := p.a.AllocPD()
	keep, err := pd.Register(make([]byte, 64), transport.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	var old []uint32
	for i := 0; i < 1000; i++ {
		mr, err := pd.Register(make([]byte, 64), transport.AccessLocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range old {
			if k == mr.LKey() {
				t.Fatalf("registration %d reuses the key %#x of a deregistered region", i, k)
			}
		}
		old = append(old[max(0, len(old)-253):], mr.LKey()) // the last 254 keys
		if err := mr.Deregister(); err != nil {
			t.Fatal(err)
		}
		if p.a.lookup(mr.LKey()) != nil {
			t.Fatalf("key %#x still valid after Deregister", mr.LKey())
		}
	}
	if len(p.a.mrs) != 1 {
		t.Errorf("region table holds %d regions for 1 live region", len(p.a.mrs))
	}
	if p.a.lookup(keep.LKey()) != keep {
		t.Error("the region kept registered was lost")
	}
}
