package metaroce

import "github.com/mrlab/mrlab/transport/metaroce/wire"

// Faults is the seam through which a test plants faults in the engine
// (the conformance suite's self-check, transport/metaroce/conformance):
// each fault makes the engine break one rule of docs/metaroce-wire.md, so
// the suite can show it notices. Production leaves Options.Faults nil; the
// engine then pays a nil check at each decision point and breaks nothing.
// The engine asks Breaks where a rule skips a check or a step, and hands
// the few values a fault alters (an ACK record, the SYN echo, a placement
// or READ source offset) to the other methods, so no fault arithmetic
// stands in the engine's own code.
type Faults interface {
	// Breaks reports whether the engine breaks rule m at the place it
	// implements it.
	Breaks(m Mutation) bool
	// Ack returns one path's ACK record as the receiver sends it (by
	// value: a pointer through an interface would make the engine's
	// record escape to the heap, an allocation per ACK).
	Ack(a wire.PathAck) wire.PathAck
	// SynEcho is the ts a SYN_ACK echoes for the SYN's ts echo.
	SynEcho(echo uint32) uint32
	// PlaceAt is where byte off of a placement at addr goes.
	PlaceAt(addr uint64, off uint32) uint64
	// ReadOffset is the offset of the source bytes a READ response chunk
	// at off carries, of size bytes, sent again if retx.
	ReadOffset(off uint32, size int, retx bool) uint32
}

// Mutation is a set of planted faults, one rule a bit; it is the Faults
// the conformance suite plants (a nil Faults and Mutation(0) break
// nothing).
type Mutation uint32

var _ Faults = Mutation(0)

// The planted faults.
const (
	// MutSACKOffByOne: the receiver sets SACK bit i for PSN cum+i instead
	// of cum+1+i (§4).
	MutSACKOffByOne Mutation = 1 << iota
	// MutRetxWrongPSN: a loss is repaired under the next PSN instead of
	// the lost one (§10 Loss).
	MutRetxWrongPSN
	// MutIgnoreECN: the sender ignores CE marks its ACKs report (§9).
	MutIgnoreECN
	// MutNoCECount: the receiver does not count CE-marked arrivals (§4
	// ce_count).
	MutNoCECount
	// MutPlaceOffset: the receiver places a WRITE one byte past its
	// address (§3 addr).
	MutPlaceOffset
	// MutAcceptBadKey: the receiver does not refuse a WRITE whose key,
	// range or permission check fails (§5 ACCESS).
	MutAcceptBadKey
	// MutIgnoreCRC: the receiver skips the CRC32C check (§1).
	MutIgnoreCRC
	// MutCumOffByOne: the receiver reports its cumulative ACK one too high
	// (§4 psn).
	MutCumOffByOne
	// MutLateTailProbe: a path whose ACKs stop sends its first tail-loss
	// probe 8 PTOs late (§10).
	MutLateTailProbe
	// MutKeepEntropy: a timed-out path keeps its entropy (§10 Timeout).
	MutKeepEntropy
	// MutIgnoreRateHint: the sender ignores the receiver's rate hint (§9).
	MutIgnoreRateHint
	// MutNoSynEcho: the SYN_ACK does not echo the SYN's ts (§7).
	MutNoSynEcho
	// MutRNRAsAccess: a SEND without a posted receive is refused as an
	// access error instead of RNR (§5, §6).
	MutRNRAsAccess
	// MutPlaceDuplicate: a duplicate chunk (a DSN already placed) is
	// counted as new data (§3 dsn).
	MutPlaceDuplicate
	// MutIgnoreGen: the receiver does not reset a path's window on a newer
	// generation (§2 gen).
	MutIgnoreGen
	// MutNoAckReq: the receiver does not ACK an ACKREQ packet at once (§4
	// ACK policy).
	MutNoAckReq
	// MutSACKFirstWord: the receiver reports only the SACK vector's first
	// 64-bit word; PSNs past cum+64 are never SACKed (§4).
	MutSACKFirstWord
	// MutReadRetxStale: a READ response sent again carries the bytes of
	// the chunk before it (offset - chunk size) under its own offset and
	// address (§3 READ responses, §10 loss).
	MutReadRetxStale
	// MutNoGrayRepath: the repath test never moves a path, however many
	// of its packets it loses (§10 gray paths).
	MutNoGrayRepath
	// MutRepathAnyLoss: a path moves on any loss, without comparing its
	// losses with the typical path's (§10 gray paths).
	MutRepathAnyLoss
	// MutNoPathCap: every path takes new data whatever the connection's
	// window or what it has to send (§9 Paths).
	MutNoPathCap
	// MutNoAckSpacing: no extra ACK copy a packet time after an ACK that
	// leaves paths owed under measured loss (§4 ACK policy).
	MutNoAckSpacing
	// MutNoCopies: a connection with measured loss and unused share sends
	// no proactive copies (§10 Copies while the share is unused).
	MutNoCopies
	// MutNoRetxProbeLoss: the receiver's loss estimate ignores PROBEs
	// flagged RETX (§4 ACK policy).
	MutNoRetxProbeLoss
	// MutPathShareFloor: in the first flight too, each path's part is its
	// quota rounded down to whole packets, the leftover packets handed to
	// no path, so up to a packet per path of the flight goes unused (§9
	// Paths).
	MutPathShareFloor
)

// mutated reports whether the connection breaks rule m (a planted fault).
func (c *Conn) mutated(m Mutation) bool {
	f := c.opts.Faults
	return f != nil && f.Breaks(m)
}

// placeAt is where byte off of a placement at addr goes.
func (c *Conn) placeAt(addr uint64, off uint32) uint64 {
	if f := c.opts.Faults; f != nil {
		return f.PlaceAt(addr, off)
	}
	return addr + uint64(off)
}

// mutateAck hands one path's ACK record as sent to the planted faults.
func (c *Conn) mutateAck(a *wire.PathAck) {
	if f := c.opts.Faults; f != nil {
		*a = f.Ack(*a)
	}
}

// synEcho is the ts a SYN_ACK echoes.
func (c *Conn) synEcho() uint32 {
	if f := c.opts.Faults; f != nil {
		return f.SynEcho(c.ctlEcho())
	}
	return c.ctlEcho()
}

// readOffset is the offset of the source bytes a READ response chunk at
// off carries.
func (c *Conn) readOffset(off uint32, size int, retx bool) uint32 {
	if f := c.opts.Faults; f != nil {
		return f.ReadOffset(off, size, retx)
	}
	return off
}

// mutateParse plants MutIgnoreCRC: a packet failing only its CRC32C check
// is taken as if it had passed.
func (c *Conn) mutateParse(pkt []byte, typ wire.Type, body []byte, err error) (wire.Type, []byte, error) {
	if err != wire.ErrChecksum || !c.mutated(MutIgnoreCRC) {
		return typ, body, err
	}
	return wire.Header(pkt).Type(), pkt[:len(pkt)-wire.TrailerSize], nil
}

// Breaks reports whether m holds rule r's fault.
func (m Mutation) Breaks(r Mutation) bool { return m&r != 0 }

// Ack plants the ACK faults: MutCumOffByOne reports cum one too high,
// MutSACKFirstWord keeps only the vector's first word, MutSACKOffByOne
// sets bit i for PSN cum+i.
func (m Mutation) Ack(a wire.PathAck) wire.PathAck {
	if m.Breaks(MutCumOffByOne) {
		a.Cum++
	}
	if m.Breaks(MutSACKFirstWord) {
		for w := 1; w < len(a.SACK); w++ {
			a.SACK[w] = 0
		}
	}
	if m.Breaks(MutSACKOffByOne) {
		// Bit i+1 moves to bit i: the vector claims PSN cum+1+i at cum+i.
		for w := range a.SACK {
			a.SACK[w] <<= 1
			if w+1 < len(a.SACK) {
				a.SACK[w] |= a.SACK[w+1] >> (wire.SACKWordBits - 1)
			}
		}
	}
	return a
}

// SynEcho plants MutNoSynEcho: the echo is off by 12345.
func (m Mutation) SynEcho(echo uint32) uint32 {
	if m.Breaks(MutNoSynEcho) {
		return echo + 12345
	}
	return echo
}

// PlaceAt plants MutPlaceOffset: a placement lands one byte on.
func (m Mutation) PlaceAt(addr uint64, off uint32) uint64 {
	if m.Breaks(MutPlaceOffset) {
		return addr + uint64(off) + 1
	}
	return addr + uint64(off)
}

// ReadOffset plants MutReadRetxStale: a resent READ response chunk
// carries the bytes of the chunk before it.
func (m Mutation) ReadOffset(off uint32, size int, retx bool) uint32 {
	if retx && m.Breaks(MutReadRetxStale) && off >= uint32(size) {
		return off - uint32(size)
	}
	return off
}

// NamedMutation is a planted fault and its name.
type NamedMutation struct {
	Name string
	M    Mutation
}

// Mutations returns every planted fault with its name, a fresh slice on
// every call (no package state a caller could change).
func Mutations() []NamedMutation {
	return []NamedMutation{
		{"sack-off-by-one", MutSACKOffByOne}, {"retx-wrong-psn", MutRetxWrongPSN}, {"ignore-ecn", MutIgnoreECN},
		{"no-ce-count", MutNoCECount}, {"place-offset", MutPlaceOffset}, {"accept-bad-key", MutAcceptBadKey},
		{"ignore-crc", MutIgnoreCRC}, {"cum-off-by-one", MutCumOffByOne}, {"late-tail-probe", MutLateTailProbe},
		{"keep-entropy", MutKeepEntropy}, {"ignore-rate-hint", MutIgnoreRateHint}, {"no-syn-echo", MutNoSynEcho},
		{"rnr-as-access", MutRNRAsAccess}, {"place-duplicate", MutPlaceDuplicate}, {"ignore-gen", MutIgnoreGen},
		{"no-ackreq", MutNoAckReq}, {"sack-first-word", MutSACKFirstWord}, {"read-retx-stale", MutReadRetxStale},
		{"no-gray-repath", MutNoGrayRepath}, {"repath-any-loss", MutRepathAnyLoss},
		{"no-path-cap", MutNoPathCap}, {"no-ack-spacing", MutNoAckSpacing},
		{"no-copies", MutNoCopies}, {"no-retx-probe-loss", MutNoRetxProbeLoss},
	}
}
