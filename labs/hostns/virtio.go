package hostns

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/mrlab/mrlab/internal/header"
)

// TryRead reads what the kernel queued on t, as Read does (a TCP or UDP
// super-packet split into MTU-sized packets with their checksums filled
// in), but never waits: with nothing queued it returns 0 and no error.
// Read goes through the Go runtime's poller, which parks the caller on an
// empty device, so a reader that does not know whether a packet is
// queued must ask first (a poll or epoll_wait: a system call); TryRead
// asks by reading. One goroutine at a time, and not beside Read.
func (t *TUN) TryRead(bufs [][]byte, sizes []int, offset int) (int, error) {
	if t.try == nil {
		rc, err := t.dev.File().SyscallConn()
		if err != nil {
			return 0, fmt.Errorf("reading %s in %s: %w", t.name, t.ns, err)
		}
		t.try = &tryReader{rc: rc, buf: make([]byte, virtioHdrLen+65535)}
		// One function for every read: a closure made per call would
		// allocate.
		t.try.read = func(fd uintptr) {
			for {
				t.try.n, t.try.err = unix.Read(int(fd), t.try.buf)
				if t.try.err != unix.EINTR {
					return
				}
			}
		}
	}
	r := t.try
	// Control holds the descriptor open meanwhile: a Close does not
	// hand its number to another file under the read.
	if err := r.rc.Control(r.read); err != nil {
		return 0, os.ErrClosed
	}
	switch {
	case r.err == unix.EAGAIN:
		return 0, nil
	case r.err == unix.EBADFD:
		return 0, os.ErrClosed
	case r.err != nil:
		return 0, fmt.Errorf("reading %s in %s: %w", t.name, t.ns, r.err)
	}
	return splitVirtio(r.buf[:r.n], bufs, sizes, offset)
}

// tryReader is TryRead's state: the raw read's buffer (the virtio-net
// header, then up to a 64 KiB packet) and results.
type tryReader struct {
	rc interface {
		Control(func(fd uintptr)) error
	}
	buf  []byte
	read func(fd uintptr)
	n    int
	err  error
}

// The virtio-net header the kernel puts before every packet a TUN opened
// with IFF_VNET_HDR hands its reader (include/uapi/linux/virtio_net.h,
// struct virtio_net_hdr, in the machine's byte order).
const (
	virtioHdrLen           = 10
	virtioNeedsCsum        = 1 // flags: CHECKSUM_PARTIAL, the checksum at csum_start+csum_offset to fill
	virtioGSONone          = 0
	virtioGSOTCPv4         = 1
	virtioGSOUDPL4         = 5
	tcpFlagFIN, tcpFlagPSH = 0x01, 0x08
)

// splitVirtio turns one raw read (header and packet) into IPv4 packets
// of bufs[i][offset:], as wireguard-go's tun does: a packet with a
// partial checksum gets it filled in; a TCP or UDP super-packet is cut
// into its segments, each with its IPv4 header (total length, an ID one
// more than the last's, checksum) and its TCP sequence number and flags
// (FIN and PSH on the last segment only) or UDP length, and its transport
// checksum. A malformed header or an IPv6 super-packet is an error (the
// packet is dropped: lab hosts have IPv6 disabled).
func splitVirtio(in []byte, bufs [][]byte, sizes []int, offset int) (int, error) {
	if len(in) < virtioHdrLen || len(bufs) == 0 {
		return 0, errors.New("short read from a TUN: no virtio-net header")
	}
	flags, gso := in[0], in[1]
	gsoSize := int(binary.NativeEndian.Uint16(in[4:]))
	csumStart := int(binary.NativeEndian.Uint16(in[6:]))
	csumOff := int(binary.NativeEndian.Uint16(in[8:]))
	in = in[virtioHdrLen:]
	if gso == virtioGSONone {
		if flags&virtioNeedsCsum != 0 {
			at := csumStart + csumOff
			if at+2 > len(in) || csumStart > at {
				return 0, fmt.Errorf("a TUN's packet of %d bytes: checksum at %d+%d", len(in), csumStart, csumOff)
			}
			initial := binary.BigEndian.Uint16(in[at:])
			in[at], in[at+1] = 0, 0
			binary.BigEndian.PutUint16(in[at:], ^header.Checksum(in[csumStart:], uint32(initial)))
		}
		if len(in) > len(bufs[0])-offset {
			return 0, fmt.Errorf("a TUN's packet of %d bytes overflows a buffer of %d", len(in), len(bufs[0])-offset)
		}
		sizes[0] = copy(bufs[0][offset:], in)
		return 1, nil
	}
	if len(in) < 20 {
		return 0, fmt.Errorf("a TUN's super-packet of %d bytes: shorter than an IPv4 header", len(in))
	}
	if gso != virtioGSOTCPv4 && gso != virtioGSOUDPL4 || in[0]>>4 != 4 {
		return 0, fmt.Errorf("a TUN's super-packet: GSO type %d, IP version %d: want IPv4 TCP or UDP", gso, in[0]>>4)
	}
	// The kernel's hdr_len may cover a whole first packet; the headers
	// end where the transport header does.
	iphLen, hdrLen := csumStart, csumStart+8
	tcp := gso == virtioGSOTCPv4
	if tcp {
		if len(in) <= csumStart+12 {
			return 0, errors.New("a TUN's TCP super-packet is too short")
		}
		th := int(in[csumStart+12]>>4) * 4
		if th < 20 || th > 60 {
			return 0, fmt.Errorf("a TUN's TCP super-packet: header of %d bytes", th)
		}
		hdrLen = csumStart + th
	}
	csumAt := csumStart + csumOff
	if iphLen < 20 || hdrLen > len(in) || csumAt+2 > hdrLen || gsoSize <= 0 {
		return 0, fmt.Errorf("a TUN's super-packet of %d bytes: headers %d, checksum at %d, segments of %d", len(in), hdrLen, csumAt, gsoSize)
	}
	in[10], in[11] = 0, 0
	in[csumAt], in[csumAt+1] = 0, 0
	seq := binary.BigEndian.Uint32(in[csumStart+4:])
	proto := uint32(in[9])
	// The pseudo-header's addresses and protocol; its length per segment.
	pseudo := uint32(header.Checksum(in[12:20], proto))
	i := 0
	for at := hdrLen; at < len(in); i++ {
		if i == len(bufs) {
			return i, fmt.Errorf("a TUN's super-packet has more than %d segments", len(bufs))
		}
		end := min(at+gsoSize, len(in))
		total := hdrLen + end - at
		out := bufs[i][offset:]
		if total > len(out) {
			return i, fmt.Errorf("a TUN's segment of %d bytes overflows a buffer of %d", total, len(out))
		}
		copy(out, in[:hdrLen])
		binary.BigEndian.PutUint16(out[4:], binary.BigEndian.Uint16(in[4:])+uint16(i))
		binary.BigEndian.PutUint16(out[2:], uint16(total))
		binary.BigEndian.PutUint16(out[10:], ^header.Checksum(out[:iphLen], 0))
		if tcp {
			binary.BigEndian.PutUint32(out[csumStart+4:], seq+uint32(gsoSize*i))
			if end != len(in) {
				out[csumStart+13] &^= tcpFlagFIN | tcpFlagPSH
			}
		} else {
			binary.BigEndian.PutUint16(out[csumStart+4:], uint16(total-csumStart))
		}
		copy(out[hdrLen:], in[at:end])
		l4 := total - csumStart
		binary.BigEndian.PutUint16(out[csumAt:], ^header.Checksum(out[csumStart:total], pseudo+uint32(l4)))
		sizes[i] = total
		at = end
	}
	return i, nil
}
