package softnic

import (
	"fmt"
	"testing"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/metaroce"
)

// TestCorruptPacketDropped flips one bit in the payload of one data packet
// on the wire, for each real transport and payload mode, and checks the
// receiving NIC path drops and counts it (RoCEv2: the NIC's ICRC check,
// DropICRC; MetaRoCE: the transport's CRC32C, ChecksumDrops) and never
// places it: every placement must hold the sender's bytes the instant it
// lands, and the WRITE still completes (the loss is repaired) with the
// destination exact. Removing either check from the receive path fails
// this test; the demux tests' fake sealer would not notice.
func TestCorruptPacketDropped(t *testing.T) {
	// The last case plants MetaRoCE's "skip the CRC check" fault: the
	// test must see the corrupt packet placed. (In synthetic mode a bit
	// flipped under a content run is not placed either way: the run, not
	// the zeros on the wire, says what lands; only the CRC drop shows.)
	ignoreCRC := transportCase{"metaroce-ignore-crc", func() []transport.Protocol {
		return []transport.Protocol{metaroce.NewProtocol(metaroce.Options{Faults: metaroce.MutIgnoreCRC})}
	}, transport.MetaRoCE}
	for _, tc := range append(transportCases()[1:], ignoreCRC) {
		planted := tc.name == ignoreCRC.name
		for _, mode := range []PayloadMode{PayloadBytes, PayloadSynthetic} {
			t.Run(fmt.Sprintf("%s/%v", tc.name, mode), func(t *testing.T) {
				p := newPair(t, 1, tc.protos)
				const size = 64 << 10
				src, dst := p.connectMode(t, size, transport.AccessLocalWrite|transport.AccessRemoteWrite, tc.kind, mode)
				src.mr.Fill(0, size, 99)
				flipped := 0
				p.ab[0].tap = func(b []byte) {
					if flipped == 0 && len(b) > 2000 {
						b[len(b)/2] ^= 0x08 // one bit, well inside the payload
						flipped++
					}
				}
				var bad, placed int
				dst.mr.OnPlace(func(off, n int) {
					placed++
					if mode == PayloadBytes && string(dst.buf[off:off+n]) != string(src.buf[off:off+n]) ||
						mode == PayloadSynthetic && !syntheticRangeOK(dst.mr, off, n) {
						bad++
					}
				})
				wr := transport.WorkRequest{ID: 1, Op: transport.OpWrite, RemoteAddr: dst.mr.Addr(), RKey: dst.mr.RKey(), NumSGE: 1}
				wr.SGL[0] = src.mr.SGE(0, size)
				if err := src.c.PostSend(&wr); err != nil {
					t.Fatal(err)
				}
				if wc := p.waitCompletion(t, src.cq, 100*sim.Millisecond); wc.Status != transport.StatusOK {
					t.Fatalf("completion %+v", wc)
				}
				drops := p.b.Stats().Drops[DropICRC] + p.b.TransportTotals().ChecksumDrops
				if planted {
					if drops != 0 || mode == PayloadBytes && bad == 0 {
						t.Errorf("with the CRC check planted away: %d drops, %d bad placements (want 0, >0)", drops, bad)
					}
					return
				}
				if flipped != 1 || drops != 1 {
					t.Errorf("flipped %d packets, receiver counted %d checksum drops (icrc %d, transport %d)",
						flipped, drops, p.b.Stats().Drops[DropICRC], p.b.TransportTotals().ChecksumDrops)
				}
				if bad != 0 || placed == 0 {
					t.Errorf("%d of %d placements held bytes the sender did not send", bad, placed)
				}
				if !dst.mr.Matches(0, size, 99) {
					t.Errorf("destination differs at byte %d after the repair", dst.mr.FirstDiff(0, size, 99))
				}
			})
		}
	}
}

// syntheticRangeOK reports whether a synthetic destination range holds
// the source's stream 99 at the same offsets (the WRITE is at offset 0 of
// both): the stream from position off on, nothing else.
func syntheticRangeOK(dst *MR, off, n int) bool {
	ok, covered := true, uint64(0)
	dst.syn.each(uint64(off), uint64(n), func(o, k, stream, pos uint64) {
		if stream != 99 || pos != uint64(off)+o {
			ok = false
		}
		covered += k
	})
	return ok && covered == uint64(n)
}
