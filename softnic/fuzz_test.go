package softnic

import (
	"testing"

	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/rocev2"
)

// FuzzReceive feeds arbitrary bytes to a NIC's receive path: raw (mode 0),
// wrapped in valid IPv4/UDP to the toy transport's port (1), or to RoCEv2's
// port with a valid ICRC so it reaches the RoCEv2 demultiplexer (2). Every
// packet must be consumed or counted, and no buffer may leak.
func FuzzReceive(f *testing.F) {
	f.Add([]byte{tSyn, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0}, uint8(1))
	f.Add([]byte{tWrite, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1}, uint8(1))
	f.Add([]byte{0x45, 0, 0, 20, 0, 0, 0x40, 0, 64, 17, 0, 0, 198, 18, 0, 1, 198, 18, 0, 2}, uint8(0))
	f.Add([]byte{0x11, 0, 0xff, 0xff, 0, 0, 0, 17, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, uint8(2))
	f.Fuzz(func(t *testing.T, data []byte, mode uint8) {
		if len(data) > 4000 {
			return
		}
		p := newPair(t, 2, func() []transport.Protocol {
			return []transport.Protocol{&toy{kind: transport.MetaRoCE, port: toyPort}, rocev2.NewProtocol(rocev2.Options{})}
		})
		pd := p.b.AllocPD()
		if _, err := pd.Register(make([]byte, 4096), transport.AccessLocalWrite|transport.AccessRemoteWrite|transport.AccessRemoteRead); err != nil {
			t.Fatal(err)
		}
		p.b.Listen(&ListenOptions{ConnOptions: ConnOptions{PD: pd}})
		var b *packet.Buffer
		switch mode % 3 {
		case 0:
			b = p.pool.Get(len(data))
			b.SetLen(len(data))
			copy(b.Data(), data)
		case 1:
			b = ipPacket(p.pool, addrA, addrB, 0xc001, toyPort, data)
		case 2:
			b = ipPacket(p.pool, addrA, addrB, 0xc001, rocev2.UDPPort, append(data, 0, 0, 0, 0))
			rocev2.SealICRC(b.Data())
		}
		p.b.Receive(0, 1, b)
		p.loop.RunUntil(10 * sim.Millisecond)
		if s := p.b.Stats(); s.RxPackets == 0 {
			t.Fatal("packet not counted")
		}
		for _, c := range p.b.Conns() {
			c.Close()
		}
		p.loop.RunUntil(20 * sim.Millisecond)
		if out := p.pool.Outstanding(); out != 0 {
			t.Fatalf("%d buffers leaked", out)
		}
	})
}
