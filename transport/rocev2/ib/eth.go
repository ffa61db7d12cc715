package ib

import (
	"encoding/binary"

	"github.com/mrlab/mrlab/internal/sim"
)

// RETH is a view of the 16-byte RDMA Extended Transport Header carried by
// the first (or only) packet of an RDMA WRITE and by an RDMA READ request:
// virtual address (8), R_Key (4), DMA length (4).
type RETH []byte

// VA returns the remote virtual address.
func (b RETH) VA() uint64 { return binary.BigEndian.Uint64(b[0:8]) }

// SetVA sets the remote virtual address.
func (b RETH) SetVA(va uint64) { binary.BigEndian.PutUint64(b[0:8], va) }

// RKey returns the remote key.
func (b RETH) RKey() uint32 { return binary.BigEndian.Uint32(b[8:12]) }

// SetRKey sets the remote key.
func (b RETH) SetRKey(k uint32) { binary.BigEndian.PutUint32(b[8:12], k) }

// DMALen returns the length of the whole transfer in bytes.
func (b RETH) DMALen() uint32 { return binary.BigEndian.Uint32(b[12:16]) }

// SetDMALen sets the transfer length.
func (b RETH) SetDMALen(n uint32) { binary.BigEndian.PutUint32(b[12:16], n) }

// Encode writes all three fields.
func (b RETH) Encode(va uint64, rkey, dmaLen uint32) {
	_ = b[RETHSize-1]
	b.SetVA(va)
	b.SetRKey(rkey)
	b.SetDMALen(dmaLen)
}

// AppendRETH appends an encoded RETH to dst.
func AppendRETH(dst []byte, va uint64, rkey, dmaLen uint32) []byte {
	dst = binary.BigEndian.AppendUint64(dst, va)
	dst = binary.BigEndian.AppendUint32(dst, rkey)
	return binary.BigEndian.AppendUint32(dst, dmaLen)
}

// ImmDt is a view of the 4-byte immediate data header.
type ImmDt []byte

// Imm returns the immediate value.
func (b ImmDt) Imm() uint32 { return binary.BigEndian.Uint32(b[0:4]) }

// SetImm sets the immediate value.
func (b ImmDt) SetImm(v uint32) { binary.BigEndian.PutUint32(b[0:4], v) }

// AETH is a view of the 4-byte ACK Extended Transport Header: syndrome (8)
// and message sequence number (24).
type AETH []byte

// Syndrome returns the syndrome byte.
func (b AETH) Syndrome() Syndrome { return Syndrome(b[0]) }

// SetSyndrome sets the syndrome byte.
func (b AETH) SetSyndrome(s Syndrome) { b[0] = byte(s) }

// MSN returns the 24-bit message sequence number: how many requests the
// responder has completed.
func (b AETH) MSN() uint32 { return binary.BigEndian.Uint32(b[0:4]) & 0xFFFFFF }

// SetMSN sets the message sequence number, keeping the syndrome.
func (b AETH) SetMSN(m uint32) { b[1], b[2], b[3] = byte(m>>16), byte(m>>8), byte(m) }

// Encode writes both fields.
func (b AETH) Encode(s Syndrome, msn uint32) {
	_ = b[AETHSize-1]
	b[0] = byte(s)
	b.SetMSN(msn)
}

// AppendAETH appends an encoded AETH to dst.
func AppendAETH(dst []byte, s Syndrome, msn uint32) []byte {
	return append(dst, byte(s), byte(msn>>16), byte(msn>>8), byte(msn))
}

// Syndrome is an AETH syndrome (IBTA table 42):
//
//	0b0 00 xxxxx  ACK, low bits = credit count (0b11111: credits not used)
//	0b0 01 ttttt  RNR NAK, low bits = RNR timer code (table 45)
//	0b0 11 ccccc  NAK, low bits = NAK code
type Syndrome uint8

// Syndrome kinds (bits 6-5).
const (
	KindACK Kind = 0
	KindRNR Kind = 1
	KindNAK Kind = 3
)

// Kind is a syndrome's type: ACK, RNR NAK or NAK.
type Kind uint8

// String names the AETH kind.
func (k Kind) String() string {
	switch k {
	case KindACK:
		return "ACK"
	case KindRNR:
		return "RNR-NAK"
	case KindNAK:
		return "NAK"
	}
	return "reserved"
}

// NAK codes.
const (
	NAKSequence      uint8 = 0 // PSN sequence error
	NAKInvalid       uint8 = 1 // invalid request
	NAKRemoteAccess  uint8 = 2 // remote access error
	NAKRemoteOp      uint8 = 3 // remote operational error
	NAKInvalidRDReq  uint8 = 4 // invalid RD request
	creditsNotUsed   uint8 = 0x1F
	syndromeKindBits       = 5
)

// Common syndromes.
const (
	SyndromeACK          Syndrome = Syndrome(creditsNotUsed) // ACK without end-to-end credits
	SyndromeNAKSequence  Syndrome = 0x60
	SyndromeNAKInvalid   Syndrome = 0x61
	SyndromeNAKAccess    Syndrome = 0x62
	SyndromeNAKRemoteOp  Syndrome = 0x63
	syndromeRNRBase      Syndrome = 0x20
	syndromeValueBitMask          = 0x1F
)

// RNRSyndrome returns the RNR NAK syndrome with timer code t (0..31).
func RNRSyndrome(t uint8) Syndrome { return syndromeRNRBase | Syndrome(t&syndromeValueBitMask) }

// NAKSyndrome returns the NAK syndrome with code c.
func NAKSyndrome(c uint8) Syndrome { return 0x60 | Syndrome(c&syndromeValueBitMask) }

// Kind returns the syndrome's type.
func (s Syndrome) Kind() Kind { return Kind(s>>syndromeKindBits) & 3 }

// Value returns the low five bits: credits, RNR timer code or NAK code.
func (s Syndrome) Value() uint8 { return uint8(s) & syndromeValueBitMask }

// String describes the syndrome.
func (s Syndrome) String() string {
	switch s.Kind() {
	case KindACK:
		return "ACK"
	case KindRNR:
		return "RNR-NAK(" + RNRTimer(s.Value()).String() + ")"
	case KindNAK:
		switch s.Value() {
		case NAKSequence:
			return "NAK(PSN sequence error)"
		case NAKInvalid:
			return "NAK(invalid request)"
		case NAKRemoteAccess:
			return "NAK(remote access error)"
		case NAKRemoteOp:
			return "NAK(remote operational error)"
		}
		return "NAK(code 0x" + hex2(s.Value()) + ")"
	}
	return "reserved syndrome 0x" + hex2(uint8(s))
}

// rnrTimer is IBTA table 45, in units of 10us: code 0 is 655.36 ms, codes
// 1..31 go from 0.01 ms to 491.52 ms.
var rnrTimer = [32]uint32{
	65536, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192,
	256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152,
}

// RNRTimer returns how long a requester waits after an RNR NAK carrying
// timer code t (the low five bits are used).
func RNRTimer(t uint8) sim.Time { return sim.Time(rnrTimer[t&31]) * 10 * sim.Microsecond }
