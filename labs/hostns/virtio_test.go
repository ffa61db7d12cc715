package hostns

import (
	"encoding/binary"
	"testing"

	"github.com/mrlab/mrlab/internal/header"
)

// superPacket is a virtio-net header and an IPv4 packet of proto (6 TCP,
// 17 UDP) with payload bytes of data, the transport checksum left
// partial (the pseudo-header's sum, as the kernel hands it), cut into
// segments of mss bytes (0: no GSO).
func superPacket(proto byte, payload, mss int) []byte {
	th := 20
	if proto == 17 {
		th = 8
	}
	ip := make([]byte, 20+th+payload)
	ip[0], ip[8], ip[9] = 0x45, 64, proto
	binary.BigEndian.PutUint16(ip[2:], uint16(len(ip)))
	binary.BigEndian.PutUint16(ip[4:], 0x1234)
	copy(ip[12:], []byte{198, 18, 0, 1, 198, 18, 0, 2})
	binary.BigEndian.PutUint16(ip[20:], 40000)
	binary.BigEndian.PutUint16(ip[22:], 5201)
	csumOff := 16
	if proto == 6 {
		binary.BigEndian.PutUint32(ip[24:], 1000) // seq
		ip[32] = 5 << 4
		ip[33] = 0x18 | 0x01 // PSH|ACK|FIN
	} else {
		binary.BigEndian.PutUint16(ip[24:], uint16(th+payload))
		csumOff = 6
	}
	for i := range payload {
		ip[20+th+i] = byte(i * 7)
	}
	binary.BigEndian.PutUint16(ip[10:], ^header.Checksum(ip[:20], 0))
	// The partial checksum: the pseudo-header's sum, not complemented.
	binary.BigEndian.PutUint16(ip[20+csumOff:], header.Checksum(ip[12:20], uint32(proto)+uint32(th+payload)))
	v := make([]byte, virtioHdrLen)
	v[0] = virtioNeedsCsum
	if mss > 0 {
		v[1] = virtioGSOTCPv4
		if proto == 17 {
			v[1] = virtioGSOUDPL4
		}
		binary.NativeEndian.PutUint16(v[2:], uint16(20+th))
		binary.NativeEndian.PutUint16(v[4:], uint16(mss))
	}
	binary.NativeEndian.PutUint16(v[6:], 20)
	binary.NativeEndian.PutUint16(v[8:], uint16(csumOff))
	return append(v, ip...)
}

// TestSplitVirtio: what TryRead hands on is what a NIC would: a partial
// checksum filled in, a super-packet cut into segments each with a valid
// IPv4 header (length, ID one more than the last's) and transport
// checksum, TCP sequence numbers advancing by the segment size and FIN
// and PSH on the last segment only, UDP lengths; the payload whole, in
// order. A malformed header is an error, never a panic.
func TestSplitVirtio(t *testing.T) {
	bufs := make([][]byte, 64)
	for i := range bufs {
		bufs[i] = make([]byte, 2048)
	}
	sizes := make([]int, len(bufs))
	for _, tc := range []struct {
		name              string
		proto             byte
		payload, mss, seg int
	}{
		{"udp", 17, 1372, 0, 1},
		{"tcp", 6, 1000, 0, 1},
		{"tcp-gso", 6, 4000, 1448, 3},
		{"tcp-gso-even", 6, 2896, 1448, 2},
		{"udp-gso", 17, 3000, 1400, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := superPacket(tc.proto, tc.payload, tc.mss)
			want := append([]byte(nil), in[virtioHdrLen+20:]...)
			n, err := splitVirtio(in, bufs, sizes, 4)
			if err != nil || n != tc.seg {
				t.Fatalf("split: %d packets, %v; want %d", n, err, tc.seg)
			}
			th := 20
			if tc.proto == 17 {
				th = 8
			}
			var payload []byte
			for i := range n {
				p := bufs[i][4 : 4+sizes[i]]
				if header.Checksum(p[:20], 0) != 0xffff || int(binary.BigEndian.Uint16(p[2:])) != len(p) || binary.BigEndian.Uint16(p[4:]) != 0x1234+uint16(i) {
					t.Fatalf("segment %d: IPv4 header % x (length %d)", i, p[:20], len(p))
				}
				l4 := len(p) - 20
				if header.Checksum(p[20:], uint32(header.Checksum(p[12:20], uint32(tc.proto)+uint32(l4)))) != 0xffff {
					t.Fatalf("segment %d: transport checksum does not verify", i)
				}
				if tc.proto == 6 {
					seq := binary.BigEndian.Uint32(p[24:])
					fin := p[33]&0x09 != 0
					if seq != 1000+uint32(i*tc.mss) || fin != (i == n-1) {
						t.Fatalf("segment %d: seq %d, FIN/PSH %v", i, seq, fin)
					}
				} else if int(binary.BigEndian.Uint16(p[24:])) != l4 {
					t.Fatalf("segment %d: UDP length %d, want %d", i, binary.BigEndian.Uint16(p[24:]), l4)
				}
				payload = append(payload, p[20+th:]...)
			}
			if string(payload) != string(want[th:]) {
				t.Fatal("the segments' payloads are not the packet's")
			}
		})
	}
	for _, bad := range [][]byte{nil, make([]byte, 5), func() []byte { b := superPacket(6, 4000, 1448); b[1] = 3; return b }(),
		func() []byte { b := superPacket(6, 4000, 1448); b[virtioHdrLen+32] = 1 << 4; return b }(),
		func() []byte { b := superPacket(17, 100, 0); binary.NativeEndian.PutUint16(b[8:], 500); return b }(),
		func() []byte { b := superPacket(6, 4000, 1448); binary.NativeEndian.PutUint16(b[4:], 0); return b }()} {
		if _, err := splitVirtio(bad, bufs, sizes, 4); err == nil {
			t.Errorf("a malformed read of %d bytes was split without an error", len(bad))
		}
	}
	if _, err := splitVirtio(superPacket(6, 64000, 100), bufs, sizes, 4); err == nil {
		t.Error("a super-packet of more segments than buffers: no error")
	}
}
