package ib

import "encoding/binary"

// Header sizes in bytes.
const (
	BTHSize    = 12
	RETHSize   = 16
	AETHSize   = 4
	ImmDtSize  = 4
	ICRCSize   = 4
	CNPPadSize = 16 // reserved bytes after a CNP's BTH
	// MaxHeaderLen is the largest header stack of the opcodes modelled here
	// (WRITE_ONLY_IMM: BTH, RETH, ImmDt) plus payload padding and the ICRC.
	MaxHeaderLen = BTHSize + RETHSize + ImmDtSize + 3 + ICRCSize
)

// DefaultPKey is the default partition key (full membership of the default
// partition), which RoCEv2 devices use unless configured otherwise.
const DefaultPKey = 0xFFFF

// QPNMask keeps the 24 bits of a queue pair number.
const QPNMask = 1<<24 - 1

// BTH is a view of the 12-byte Base Transport Header:
//
//	byte 0     opcode
//	byte 1     SE(1) MigReq(1) PadCnt(2) TVer(4)
//	bytes 2-3  P_Key
//	byte 4     FECN(1) BECN(1) reserved(6)
//	bytes 5-7  destination QP
//	byte 8     AckReq(1) reserved(7)
//	bytes 9-11 PSN
//
// The view must be at least BTHSize long.
type BTH []byte

// Opcode returns the opcode.
func (b BTH) Opcode() Opcode { return Opcode(b[0]) }

// SetOpcode sets the opcode.
func (b BTH) SetOpcode(o Opcode) { b[0] = byte(o) }

// SE returns the solicited-event bit.
func (b BTH) SE() bool { return b[1]&0x80 != 0 }

// SetSE sets the solicited-event bit.
func (b BTH) SetSE(v bool) { b[1] = setBit(b[1], 0x80, v) }

// MigReq returns the migration-request bit.
func (b BTH) MigReq() bool { return b[1]&0x40 != 0 }

// SetMigReq sets the migration-request bit.
func (b BTH) SetMigReq(v bool) { b[1] = setBit(b[1], 0x40, v) }

// PadCount returns how many pad bytes follow the payload (0..3) to align it
// to 4 bytes.
func (b BTH) PadCount() int { return int(b[1]>>4) & 3 }

// SetPadCount sets the pad count (0..3).
func (b BTH) SetPadCount(n int) { b[1] = b[1]&^0x30 | byte(n&3)<<4 }

// TVer returns the transport header version (0 today).
func (b BTH) TVer() uint8 { return b[1] & 0x0F }

// SetTVer sets the transport header version.
func (b BTH) SetTVer(v uint8) { b[1] = b[1]&^0x0F | v&0x0F }

// PKey returns the partition key.
func (b BTH) PKey() uint16 { return binary.BigEndian.Uint16(b[2:4]) }

// SetPKey sets the partition key.
func (b BTH) SetPKey(k uint16) { binary.BigEndian.PutUint16(b[2:4], k) }

// FECN returns the forward explicit congestion notification bit.
func (b BTH) FECN() bool { return b[4]&0x80 != 0 }

// SetFECN sets the FECN bit.
func (b BTH) SetFECN(v bool) { b[4] = setBit(b[4], 0x80, v) }

// BECN returns the backward explicit congestion notification bit (set in
// RoCEv2 CNPs).
func (b BTH) BECN() bool { return b[4]&0x40 != 0 }

// SetBECN sets the BECN bit.
func (b BTH) SetBECN(v bool) { b[4] = setBit(b[4], 0x40, v) }

// DestQP returns the 24-bit destination queue pair number.
func (b BTH) DestQP() uint32 { return binary.BigEndian.Uint32(b[4:8]) & QPNMask }

// SetDestQP sets the destination QP, keeping FECN/BECN.
func (b BTH) SetDestQP(qp uint32) {
	b[5], b[6], b[7] = byte(qp>>16), byte(qp>>8), byte(qp)
}

// AckReq returns the acknowledge-request bit.
func (b BTH) AckReq() bool { return b[8]&0x80 != 0 }

// SetAckReq sets the acknowledge-request bit.
func (b BTH) SetAckReq(v bool) { b[8] = setBit(b[8], 0x80, v) }

// PSN returns the packet sequence number.
func (b BTH) PSN() PSN { return PSN(binary.BigEndian.Uint32(b[8:12]) & PSNMask) }

// SetPSN sets the packet sequence number, keeping AckReq.
func (b BTH) SetPSN(p PSN) {
	b[9], b[10], b[11] = byte(p>>16), byte(p>>8), byte(p)
}

// BTHFields are the fields Encode writes; reserved bits are written as 0.
type BTHFields struct {
	Opcode   Opcode
	SE       bool
	MigReq   bool
	PadCount int
	TVer     uint8
	PKey     uint16
	FECN     bool
	BECN     bool
	DestQP   uint32
	AckReq   bool
	PSN      PSN
}

// Encode writes all twelve bytes from f.
func (b BTH) Encode(f *BTHFields) {
	_ = b[BTHSize-1]
	b[0] = byte(f.Opcode)
	b[1] = byte(f.PadCount&3)<<4 | f.TVer&0x0F
	if f.SE {
		b[1] |= 0x80
	}
	if f.MigReq {
		b[1] |= 0x40
	}
	binary.BigEndian.PutUint16(b[2:4], f.PKey)
	binary.BigEndian.PutUint32(b[4:8], f.DestQP&QPNMask)
	if f.FECN {
		b[4] |= 0x80
	}
	if f.BECN {
		b[4] |= 0x40
	}
	binary.BigEndian.PutUint32(b[8:12], uint32(f.PSN)&PSNMask)
	if f.AckReq {
		b[8] |= 0x80
	}
}

// AppendBTH appends an encoded BTH to dst.
func AppendBTH(dst []byte, f *BTHFields) []byte {
	n := len(dst)
	dst = append(dst, make([]byte, BTHSize)...)
	BTH(dst[n:]).Encode(f)
	return dst
}

func setBit(b, mask byte, v bool) byte {
	if v {
		return b | mask
	}
	return b &^ mask
}
