package softnic

import (
	"testing"

	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
)

// FuzzReceive feeds arbitrary bytes to a NIC's receive path, both raw and
// wrapped in valid IPv4/UDP headers to the transport's port, and checks that
// every packet is either consumed or counted and that no buffer leaks.
func FuzzReceive(f *testing.F) {
	f.Add([]byte{tSyn, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0}, true)
	f.Add([]byte{tWrite, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1}, true)
	f.Add([]byte{0x45, 0, 0, 20, 0, 0, 0x40, 0, 64, 17, 0, 0, 198, 18, 0, 1, 198, 18, 0, 2}, false)
	f.Fuzz(func(t *testing.T, data []byte, wrap bool) {
		if len(data) > 4000 {
			return
		}
		p := newPair(t, 2, toyProtos)
		pd := p.b.AllocPD()
		if _, err := pd.Register(make([]byte, 4096), transport.AccessLocalWrite|transport.AccessRemoteWrite|transport.AccessRemoteRead); err != nil {
			t.Fatal(err)
		}
		p.b.Listen(&ListenOptions{ConnOptions: ConnOptions{PD: pd}})
		var b *packet.Buffer
		if wrap {
			b = ipPacket(p.pool, addrA, addrB, 0xc001, toyPort, data)
		} else {
			b = p.pool.Get(len(data))
			b.SetLen(len(data))
			copy(b.Data(), data)
		}
		p.b.Receive(0, 1, b)
		p.loop.RunUntil(10 * sim.Millisecond)
		s := p.b.Stats()
		if s.RxPackets == 0 {
			t.Fatal("packet not counted")
		}
		if out := p.pool.Outstanding(); out != 0 {
			t.Fatalf("%d buffers leaked", out)
		}
	})
}
