package live

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"testing"

	"github.com/mrlab/mrlab/internal/header"
	"github.com/mrlab/mrlab/internal/testenv"
	"github.com/mrlab/mrlab/labs/hostns"
)

// TestWriteCoalescesSegmentRun: a batch holding a run of one TCP flow's
// full-sized segments reaches the host's kernel in one write (the TUN's
// GRO coalesces them, as a NIC hands a kernel one large packet), up to the
// largest IPv4 packet: 44 segments of 1448 bytes, one packet on the
// kernel's mr0 counters (it took 4 writes when the buffers held 16 KiB).
// And coalescing hides no corruption: a segment whose checksum is wrong
// (a bit the lab's link flipped) is written on its own, and the kernel
// counts it as a checksum error (Tcp InCsumErrors) and drops it.
func TestWriteCoalescesSegmentRun(t *testing.T) {
	testenv.RequireNamespaces(t)
	ns := testNamespace(t, fmt.Sprintf("mrlt-%d-gro", os.Getpid()))
	tun, err := ns.OpenTUN(ifaceName)
	if err != nil {
		t.Fatal(err)
	}
	defer tun.Close()
	src, dst := netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.2")
	if err := ns.Configure(tun, hostns.IfConfig{Addr: netip.PrefixFrom(dst, 32), Routes: []netip.Prefix{netip.MustParsePrefix("198.18.0.0/15")}, MTU: DefaultMTU}); err != nil {
		t.Fatal(err)
	}
	p := idlePacer(t)
	const segs, mss = 44, DefaultMTU - 52 // 1448: TCP with timestamps
	for _, tc := range []struct {
		name    string
		corrupt int // the segment whose checksum is wrong; -1: none
		writes  uint64
		csumErr uint64
	}{
		{"run", -1, 1, 0},
		{"corrupt-segment", 20, 3, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := p.newOutput(tun, 1000, DefaultMTU, true)
			before, err := ns.Counters(ifaceName)
			if err != nil {
				t.Fatal(err)
			}
			csum0 := snmpCounter(t, ns, "Tcp", "InCsumErrors")
			seq := uint32(1000)
			for i := range segs {
				seg := tcpSegment(src, dst, seq, uint16(i), mss)
				if i == tc.corrupt {
					seg[len(seg)-1] ^= 0x10 // after the checksum: a flipped bit
				}
				if !o.Send(seg) {
					t.Fatalf("segment %d dropped by the output", i)
				}
				seq += mss
			}
			o.flush()
			after, err := ns.Counters(ifaceName)
			if err != nil {
				t.Fatal(err)
			}
			if w := after.RxPackets - before.RxPackets; w != tc.writes {
				t.Errorf("%d segments of one flow reached the kernel in %d packets, want %d", segs, w, tc.writes)
			}
			if b, want := after.RxBytes-before.RxBytes, uint64(segs*mss)+tc.writes*52; b != want {
				t.Errorf("the kernel received %d bytes, want %d (every segment's payload, headers once per packet)", b, want)
			}
			if d := o.Drops(); d != 0 {
				t.Errorf("%d write drops", d)
			}
			if c := snmpCounter(t, ns, "Tcp", "InCsumErrors") - csum0; c != tc.csumErr {
				t.Errorf("the kernel counted %d TCP checksum errors, want %d", c, tc.csumErr)
			}
		})
	}
}

// tcpSegment is an IPv4/TCP segment (ACK, timestamps option) of payload
// bytes at seq from src:40000 to dst:5201, IP id id, both checksums set.
func tcpSegment(src, dst netip.Addr, seq uint32, id uint16, payload int) []byte {
	const ihl, thl = 20, 32
	b := make([]byte, ihl+thl+payload)
	b[0] = 0x45
	binary.BigEndian.PutUint16(b[2:], uint16(len(b)))
	binary.BigEndian.PutUint16(b[4:], id)
	b[6] = 0x40 // DF
	b[8] = 64
	b[9] = 6
	s, d := src.As4(), dst.As4()
	copy(b[12:], s[:])
	copy(b[16:], d[:])
	binary.BigEndian.PutUint16(b[10:], ^header.Checksum(b[:ihl], 0))
	tcp := b[ihl:]
	binary.BigEndian.PutUint16(tcp[0:], 40000)
	binary.BigEndian.PutUint16(tcp[2:], 5201)
	binary.BigEndian.PutUint32(tcp[4:], seq)
	binary.BigEndian.PutUint32(tcp[8:], 1)
	tcp[12] = thl / 4 << 4
	tcp[13] = 0x10 // ACK
	binary.BigEndian.PutUint16(tcp[14:], 65535)
	tcp[20], tcp[21], tcp[22], tcp[23] = 1, 1, 8, 10 // NOP NOP timestamps
	binary.BigEndian.PutUint32(tcp[24:], 7)
	binary.BigEndian.PutUint32(tcp[28:], 3)
	for i := range payload {
		tcp[thl+i] = byte(i*7 + int(seq))
	}
	// The pseudo-header: addresses, protocol, TCP length.
	var ph [12]byte
	copy(ph[0:], s[:])
	copy(ph[4:], d[:])
	ph[9] = 6
	binary.BigEndian.PutUint16(ph[10:], uint16(len(tcp)))
	sum := uint32(header.Checksum(ph[:], 0))
	binary.BigEndian.PutUint16(tcp[16:], ^header.Checksum(tcp, sum))
	return b
}
