package rocev2

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/mrlab/mrlab/internal/header"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/rocev2/ib"
)

// fuzzPair is an established pair where b has posted receives and has
// requests of its own outstanding (so ACKs and READ responses have
// something to match). It is deterministic: the same PSNs every time.
func fuzzPair(t testing.TB, opts ...Options) (*harness, []byte) {
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	h := newHarness(t, harnessConfig{noTrace: true, mtu: 256, opts: o})
	h.dial()
	h.a.mem.add(0x1000, 8192, allAccess) // key 1 on a
	k, _ := h.b.mem.add(0x1000, 8192, allAccess)
	_, canary := h.b.mem.add(0x9000, 512, transport.AccessLocalWrite) // never remotely writable
	fill(canary, 0x5a)
	for i := 0; i < 3; i++ {
		h.b.conn.PostRecv(h.loop.Now(), &transport.WorkRequest{ID: uint64(10 + i), SGL: [4]transport.SGE{{Addr: 0x1000 + uint64(i)*1024, Len: 1024, LKey: k}}, NumSGE: 1})
	}
	w := writeWR(1, k, 0x1000, 600, 1, 0x1000)
	h.b.conn.PostSend(h.loop.Now(), &w)
	rd := writeWR(2, k, 0x1800, 700, 1, 0x1000)
	rd.Op = transport.OpRead
	h.b.conn.PostSend(h.loop.Now(), &rd)
	buf := make([]byte, 256+transport.HeaderRoom)
	for i := 0; i < 8; i++ {
		h.b.conn.Transmit(h.loop.Now(), 0, buf) // sent into the void
	}
	return h, canary
}

// chunks splits fuzz input into packets: a 2-byte length, then the bytes.
func chunks(data []byte, fn func(p []byte, ce bool)) {
	for len(data) >= 2 {
		n := int(binary.BigEndian.Uint16(data)) & 0x7fff
		ce := data[0]&0x80 != 0
		data = data[2:]
		n = min(n, len(data))
		fn(data[:n], ce)
		data = data[n:]
	}
}

func appendChunk(dst, p []byte) []byte {
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(p)))
	return append(dst, p...)
}

// recordedSeeds runs a real exchange and returns what a sent to b.
func recordedSeeds(f testing.TB) [][]byte {
	h, _ := fuzzPair(f)
	var sent [][]byte
	h.onSend = func(from *endpoint, pk *ib.Packet) {
		if from == h.a && pk.BTH.DestQP() != cmQPN {
			// pk's views share the buffer; rebuild the payload from them.
			n := pk.BTH.Opcode().HeaderLen() + len(pk.Payload) + pk.BTH.PadCount() + ib.ICRCSize
			sent = append(sent, append([]byte(nil), pk.BTH[:n]...))
		}
	}
	lkey := uint32(1)
	h.a.postSend(writeWR(1, lkey, 0x1000, 700, 1, 0x1000))
	s, k := sgl(lkey, 0x1000, 200)
	h.a.postSend(transport.WorkRequest{ID: 2, Op: transport.OpSendImm, SGL: s, NumSGE: k, Imm: 9})
	rd := writeWR(3, lkey, 0x1400, 600, 1, 0x1000)
	rd.Op = transport.OpRead
	h.a.postSend(rd)
	h.filter = func(from *endpoint, pk *ib.Packet) verdict { return markCE }
	h.runUntil(func() bool { return len(h.a.comps) == 3 }, sim.Second)
	// Responses to b's own requests (which fuzzPair sent into the void):
	// ACK, NAKs and a READ response, as a would send them.
	start := h.b.conn.req.startPSN
	resp := func(op ib.Opcode, psn ib.PSN, syn ib.Syndrome, payload int) []byte {
		b := ib.AppendBTH(nil, &ib.BTHFields{Opcode: op, PKey: ib.DefaultPKey, DestQP: h.b.conn.QPN(), PSN: psn})
		if op.HasAETH() {
			b = ib.AppendAETH(b, syn, 1)
		}
		b = append(b, make([]byte, payload+ib.ICRCSize)...)
		return b
	}
	sent = append(sent,
		resp(ib.OpAcknowledge, start, ib.SyndromeACK, 0),
		resp(ib.OpAcknowledge, start.Add(1), ib.SyndromeNAKSequence, 0),
		resp(ib.OpAcknowledge, start.Add(2), ib.RNRSyndrome(1), 0),
		resp(ib.OpAcknowledge, start.Add(2), ib.SyndromeNAKAccess, 0),
		resp(ib.OpReadResponseFirst, start.Add(3), ib.SyndromeACK, 256),
		resp(ib.OpReadResponseMiddle, start.Add(4), 0, 256),
		resp(ib.OpReadResponseLast, start.Add(5), ib.SyndromeACK, 188))
	return sent
}

func FuzzReceive(f *testing.F) {
	seeds := recordedSeeds(f)
	var all []byte
	for _, p := range seeds {
		f.Add(appendChunk(nil, p))
		all = appendChunk(all, p)
	}
	f.Add(all)
	if len(seeds) > 3 {
		// A gap: skip the second packet.
		var gap []byte
		for i, p := range seeds {
			if i != 1 {
				gap = appendChunk(gap, p)
			}
		}
		f.Add(gap)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		// Odd-length inputs drive a QP with the loss recovery of current
		// NICs (selective repeat keeps what arrives past a gap).
		var o Options
		if len(data)%2 == 1 {
			o = Options{SelectiveRepeat: true, AdaptiveRetrans: true, SlowRestart: true, TxWindow: true}
		}
		h, canary := fuzzPair(t, o)
		before := append([]byte(nil), canary...)
		c := h.b.conn
		now := h.loop.Now()
		buf := make([]byte, 256+transport.HeaderRoom)
		chunks(data, func(p []byte, ce bool) {
			c.Receive(now, p, transport.RxMeta{CE: ce})
			for i := 0; i < 4; i++ {
				if n, _ := c.Transmit(now, 0, buf); n > len(buf) || n < 0 {
					t.Fatalf("Transmit returned %d for a %d-byte buffer", n, len(buf))
				}
			}
			now += 7 * sim.Microsecond
			if d := c.Deadline(); d <= now {
				c.OnTimer(now)
			}
		})
		r, q := &c.req, &c.resp
		if !(r.head <= r.next && r.next <= r.assigned && r.assigned <= r.tail) || q.head > q.tail || q.rt-q.rh > uint64(len(q.reads)) {
			t.Fatalf("queue invariants broken: sq %d %d %d %d rq %d %d reads %d %d", r.head, r.next, r.assigned, r.tail, q.head, q.tail, q.rh, q.rt)
		}
		if !bytes.Equal(before, canary) {
			t.Fatal("a region without remote access was written")
		}
	})
}

func FuzzDemux(f *testing.F) {
	p := NewProtocol(Options{})
	h := newHarness(f, harnessConfig{noTrace: true})
	var cm [][]byte
	h.onSend = func(from *endpoint, pk *ib.Packet) {
		if pk.BTH.DestQP() == cmQPN {
			cm = append(cm, append([]byte(nil), pk.BTH[:cmPacketLen]...))
		}
	}
	h.dial()
	for _, s := range cm {
		f.Add(s)
	}
	f.Add([]byte{0x11, 0, 0xff, 0xff, 0, 0, 0, 0x20, 0, 0, 0, 1, 0x1f, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		id, setup, err := p.Demux(b)
		if err != nil {
			return
		}
		if setup && id != 0 {
			t.Fatalf("setup with id %d", id)
		}
		if !setup && (id == 0 || id > ib.QPNMask-QPNOffset) {
			t.Fatalf("id %d out of range", id)
		}
		if setup {
			_, _ = p.Accept(0, transport.Config{LocalID: 1, Ports: 1, Memory: &testMem{}}, b, transport.RxMeta{})
		}
	})
}

func FuzzCMMessage(f *testing.F) {
	m := make(CMMessage, CMSize)
	m.Encode(&CMFields{Attr: CMReq, TID: 77, SenderQPN: 0x11, StartPSN: 5, MTU: 4096, ReadDepth: 16, Service: 18515})
	f.Add([]byte(m))
	f.Fuzz(func(t *testing.T, b []byte) {
		m := CMMessage(b)
		if m.Validate() != nil {
			return
		}
		f := CMFields{Attr: m.Attr(), TID: m.TID(), SenderQPN: m.SenderQPN(), ReceiverQPN: m.ReceiverQPN(),
			StartPSN: m.StartPSN(), MTU: m.MTU(), ReadDepth: m.ReadDepth(), Service: m.Service()}
		again := make(CMMessage, CMSize)
		again.Encode(&f)
		if again.Validate() != nil || again.TID() != m.TID() || again.Attr() != m.Attr() || again.MTU() != m.MTU() ||
			again.Service() != m.Service() {
			t.Fatalf("re-encoding a valid message changed it")
		}
	})
}

func FuzzICRC(f *testing.F) {
	f.Add(mustHex(f, cx4CNP))
	f.Add([]byte{0x45, 0, 0, 20})
	f.Fuzz(func(t *testing.T, b []byte) {
		_ = CheckICRC(b)
		c := append([]byte(nil), b...)
		SealICRC(c)
		if _, _, ok := icrcBounds(c); ok {
			if !CheckICRC(c) {
				t.Fatal("a sealed packet fails its check")
			}
			tl := int(header.IPv4(c).TotalLength())
			if !bytes.Equal(c[:tl-4], b[:tl-4]) || !bytes.Equal(c[tl:], b[tl:]) {
				t.Fatal("SealICRC wrote outside the ICRC")
			}
		} else if !bytes.Equal(b, c) {
			t.Fatal("SealICRC changed a packet it cannot seal")
		}
	})
}

// TestRecordedSeeds checks that FuzzReceive starts from every kind of
// packet a responder and a requester meet.
func TestRecordedSeeds(t *testing.T) {
	seen := map[ib.Opcode]bool{}
	for _, s := range recordedSeeds(t) {
		seen[ib.BTH(s).Opcode()] = true
	}
	for _, op := range []ib.Opcode{ib.OpWriteFirst, ib.OpWriteMiddle, ib.OpWriteLast, ib.OpSendOnlyImm,
		ib.OpReadRequest, ib.OpAcknowledge, ib.OpCNP} {
		if !seen[op] {
			t.Errorf("no %v among the seeds (have %v)", op, seen)
		}
	}
}
