package metaroce

import (
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/metaroce/wire"
)

// encodeChunk writes a data packet for chunk dsn on (p, psn) into b.
func (c *Conn) encodeChunk(b []byte, p *sndPath, psn, dsn uint32, retx bool, extra wire.Flags) int {
	ch := c.chunk(dsn)
	f := wire.DataFields{
		Common:  wire.Common{Path: p.id, Gen: p.gen, DstConn: c.peer, PSN: psn, TS: c.ts()},
		MSNBase: c.s.msnBase,
		DSN:     dsn,
		Offset:  ch.offset,
		Demand:  c.demandKBs(int(ch.size)),
	}
	f.Flags |= extra
	if retx {
		f.Flags |= wire.FlagRetx
	}
	payload := b[wire.DataSize : wire.DataSize+int(ch.size)]
	zs, _ := c.cfg.Memory.(transport.ZeroSpanner)
	n := 0
	ok := true
	if ch.job < 0 {
		m := c.msg(ch.msn)
		f.Type, f.Stream, f.StreamPrev, f.MSN, f.MsgLen = m.typ, m.wr.Stream, m.prev, ch.msn, m.length
		switch m.typ {
		case wire.TypeWrite:
			f.Addr, f.Key = m.wr.RemoteAddr+uint64(ch.offset), m.wr.RKey
			if m.imm {
				f.Token = m.token
			}
		case wire.TypeSend:
			f.Token = m.token
		case wire.TypeReadReq:
			f.Addr, f.Key = m.wr.RemoteAddr, m.wr.RKey
			f.Flags |= wire.FlagFirst | wire.FlagLast
		}
		if m.imm {
			f.Flags |= wire.FlagImm
			f.Imm = m.wr.Imm
		}
		if !ch.abort {
			if m.typ == wire.TypeReadReq {
				for i := 0; i < m.wr.NumSGE; i++ {
					s := &m.wr.SGL[i]
					wire.PutSink(payload, i, s.Addr, s.Len, s.LKey)
				}
				n = len(payload)
			} else if ok = c.gather(zs, payload, m.wr.SGL[:m.wr.NumSGE], ch.offset, 0); ok {
				n = len(payload)
			} else {
				c.failMsg(ch.msn, transport.StatusLocalProtection)
			}
		}
	} else {
		r := &c.s.resp[ch.job]
		f.Type, f.Stream, f.MSN, f.MsgLen = wire.TypeReadResp, r.stream, r.msn, r.length
		s, _ := r.sinkAt(ch.offset)
		f.Addr, f.Key = s.addr, s.key
		if !ch.abort {
			src := region(r.src, r.length, r.key)
			if ok = c.gather(zs, payload, src[:], c.readOffset(ch.offset, int(ch.size), retx), transport.AccessRemoteRead); ok {
				n = len(payload)
			} else {
				ch.status = transport.StatusRemoteAccess
			}
		}
	}
	if !ok {
		ch.abort = true
		if ch.status == 0 {
			ch.status = transport.StatusLocalProtection
		}
		n = 0
	}
	if f.Type != wire.TypeReadReq {
		if ch.offset == 0 {
			f.Flags |= wire.FlagFirst
		}
		if ch.offset+uint32(ch.size) >= f.MsgLen {
			f.Flags |= wire.FlagLast
		}
	}
	if ch.abort {
		f.Flags |= wire.FlagAbort
		f.Imm = uint32(ch.status)
		n = 0
	}
	wire.Data(b).Put(&f)
	return seal(zs, b, wire.DataSize+n)
}

// seal writes b[:n]'s CRC32C trailer; payload bytes the NIC's DMA left
// as zeros for synthetic content (zs, the Memory as a ZeroSpanner, if it
// is one) are checksummed without being read. The trailer is the same
// either way.
func seal(zs transport.ZeroSpanner, b []byte, n int) int {
	if zs != nil {
		at, z := zs.ZeroSpan(b[:n])
		return wire.SealZeros(b, n, at, z)
	}
	return wire.Seal(b, n)
}

// parse is wire.Parse, with a payload that travelled header-only
// (transport.ZeroSpanner) checksummed without being read.
func (c *Conn) parse(pkt []byte) (wire.Type, []byte, error) {
	if zs, ok := c.cfg.Memory.(transport.ZeroSpanner); ok {
		at, z := zs.ZeroSpan(pkt)
		return wire.ParseZeros(pkt, at, z)
	}
	return wire.Parse(pkt)
}

// encodeProbe writes a PROBE for (p, psn).
func (c *Conn) encodeProbe(b []byte, p *sndPath, psn uint32, retx bool) int {
	f := wire.Common{Type: wire.TypeProbe, Flags: wire.FlagAckReq, Path: p.id, Gen: p.gen, DstConn: c.peer, PSN: psn, TS: c.ts()}
	if retx {
		f.Flags |= wire.FlagRetx
	}
	wire.Header(b).Put(&f)
	return wire.Seal(b, wire.CommonSize)
}
