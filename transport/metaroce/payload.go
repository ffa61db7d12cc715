package metaroce

import "github.com/mrlab/mrlab/transport"

// Payload bytes move between memory regions and packets in exactly two
// places: gather (memory to packet, at the sender of WRITE, SEND and READ
// response data) and place (packet to memory, at the receiver). The rest
// of the engine handles only lengths, offsets and keys.

// gather fills dst with the bytes at offset off of the buffer sgl
// describes (its elements in order, as one byte range), reading through
// the NIC's Memory with access. It reports false if an element does not
// resolve or the buffer ends before dst is full; dst may then be partly
// written.
//
// dst is a data packet's payload, and every data packet is sealed (seal)
// after its gather, asking ZeroSpan before any byte of dst is read: so
// zs, the Memory as a transport.ZeroSpanner if it is one, is read with
// ReadLazy, which may leave zeros unwritten.
func (c *Conn) gather(zs transport.ZeroSpanner, dst []byte, sgl []transport.SGE, off uint32, access transport.Access) bool {
	n := 0
	for i := 0; i < len(sgl) && n < len(dst); i++ {
		s := &sgl[i]
		if off >= s.Len {
			off -= s.Len
			continue
		}
		k := min(int(s.Len-off), len(dst)-n)
		var st transport.Status
		if zs != nil {
			st = zs.ReadLazy(dst[n:n+k], s.LKey, s.Addr+uint64(off), access)
		} else {
			st = c.cfg.Memory.Read(dst[n:n+k], s.LKey, s.Addr+uint64(off), access)
		}
		if st != transport.StatusOK {
			return false
		}
		n += k
		off = 0
	}
	return n == len(dst)
}

// place writes src at offset off of the buffer sgl describes, through the
// NIC's Memory with access. It reports false if an element does not
// resolve or the buffer ends before src is placed; the bytes before the
// failing element are then already written (callers check a whole
// message's range before placing any of it where that matters).
func (c *Conn) place(sgl []transport.SGE, off uint32, src []byte, access transport.Access) bool {
	for i := 0; i < len(sgl) && len(src) > 0; i++ {
		s := &sgl[i]
		if off >= s.Len {
			off -= s.Len
			continue
		}
		k := min(int(s.Len-off), len(src))
		if st := c.cfg.Memory.Write(s.LKey, c.placeAt(s.Addr, off), src[:k], access); st != transport.StatusOK {
			return false
		}
		src = src[k:]
		off = 0
	}
	return len(src) == 0
}

// region describes n bytes at addr in the region key as a one-element
// scatter-gather list.
func region(addr uint64, n uint32, key uint32) [1]transport.SGE {
	return [1]transport.SGE{{Addr: addr, Len: n, LKey: key}}
}

// sglAt returns where byte off of a work request's SGL is, and how many
// bytes of that element follow.
func sglAt(wr *transport.WorkRequest, off uint32) (addr uint64, key, room uint32, ok bool) {
	for i := 0; i < wr.NumSGE; i++ {
		s := &wr.SGL[i]
		if off < s.Len {
			return s.Addr + uint64(off), s.LKey, s.Len - off, true
		}
		off -= s.Len
	}
	return 0, 0, 0, false
}
