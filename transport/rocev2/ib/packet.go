package ib

import "errors"

// Decode errors. They are sentinels so a per-packet decode failure costs a
// counter, not an allocation.
var (
	ErrTruncated   = errors.New("ib: packet shorter than its headers")
	ErrVersion     = errors.New("ib: unsupported BTH transport version")
	ErrUnsupported = errors.New("ib: opcode not supported")
	ErrPad         = errors.New("ib: pad count larger than the payload")
)

// Packet is a decoded RoCEv2 transport packet: views into the bytes that
// follow the UDP header. Views of absent headers are nil.
type Packet struct {
	BTH     BTH
	RETH    RETH
	AETH    AETH
	ImmDt   ImmDt
	Payload []byte // the payload without pad bytes and ICRC
	ICRC    []byte // the 4 trailer bytes
}

// Decode parses b (a UDP payload: BTH through ICRC) into p. It checks that
// every header the opcode implies is present and that the pad count fits;
// it does not check the ICRC (that needs the IP header, see rocev2.CheckICRC).
func (p *Packet) Decode(b []byte) error {
	*p = Packet{}
	if len(b) < BTHSize+ICRCSize {
		return ErrTruncated
	}
	bth := BTH(b[:BTHSize])
	if bth.TVer() != 0 {
		return ErrVersion
	}
	op := bth.Opcode()
	info := &ops[op]
	if info.name == "" {
		return ErrUnsupported
	}
	hl := op.HeaderLen()
	if len(b) < hl+ICRCSize {
		return ErrTruncated
	}
	p.BTH = bth
	off := BTHSize
	if info.flags&hasRETH != 0 {
		p.RETH = RETH(b[off : off+RETHSize])
		off += RETHSize
	}
	if info.flags&hasAETH != 0 {
		p.AETH = AETH(b[off : off+AETHSize])
		off += AETHSize
	}
	if info.flags&hasImm != 0 {
		p.ImmDt = ImmDt(b[off : off+ImmDtSize]) // the last header
	}
	end := len(b) - ICRCSize
	pad := bth.PadCount()
	if end-hl < pad {
		return ErrPad
	}
	p.Payload = b[hl : end-pad]
	p.ICRC = b[end:]
	return nil
}

// PadFor returns the pad count that aligns an n-byte payload to 4 bytes.
func PadFor(n int) int { return -n & 3 }
