package wire

import "encoding/binary"

// Setup is a view of a SYN or SYN_ACK: what each end tells the other when a
// connection opens. dst_conn is 0 in a SYN and the initiator's id in a
// SYN_ACK.
//
//	16 src_conn    sender's connection id (nonzero)
//	20 ack_delay   the longest the sender holds an ACK as a receiver, ns
//	               (its AckDelay): the other end allows for it in its timers
//	24 nonce       initiator's random connection nonce (echoed in SYN_ACK);
//	               a repeated SYN with a known nonce is not a new connection
//	32 paths       paths the sender will use toward the receiver (1..256)
//	34 ports       sender's NIC ports (planes)
//	35 reserved    0
//	36 mtu         sender's path MTU (largest payload per packet)
//	38 msg_window  messages the sender accepts in flight toward it
//	40 dsn_window  chunks the sender accepts in flight toward it
//	44 line_rate   sender's per-port line rate, Mb/s
//	48 service     the service (port) a SYN asks for; 0 in a SYN_ACK
//	50 first_share in a SYN_ACK: the rate the dialer may send at before
//	               its first ACK, in 65535ths of the acceptor's capacity
//	               (ports x line_rate); 0: one packet. 0 in a SYN
type Setup []byte

// SrcConn returns the sender's connection id.
func (s Setup) SrcConn() uint32 { return binary.BigEndian.Uint32(s[16:]) }

// AckDelay returns the sender's longest ACK delay in nanoseconds.
func (s Setup) AckDelay() uint32 { return binary.BigEndian.Uint32(s[20:]) }

// Service returns the service a SYN asks for.
func (s Setup) Service() uint16 { return binary.BigEndian.Uint16(s[48:]) }

// Nonce returns the connection nonce.
func (s Setup) Nonce() uint64 { return binary.BigEndian.Uint64(s[24:]) }

// Paths returns the sender's path count.
func (s Setup) Paths() int { return int(binary.BigEndian.Uint16(s[32:])) }

// Ports returns the sender's port count.
func (s Setup) Ports() int { return int(s[34]) }

// MTU returns the sender's path MTU.
func (s Setup) MTU() int { return int(binary.BigEndian.Uint16(s[36:])) }

// MsgWindow returns the message window the sender accepts.
func (s Setup) MsgWindow() int { return int(binary.BigEndian.Uint16(s[38:])) }

// DSNWindow returns the chunk window the sender accepts.
func (s Setup) DSNWindow() int { return int(binary.BigEndian.Uint32(s[40:])) }

// LineRate returns the sender's per-port line rate in Mb/s.
func (s Setup) LineRate() uint32 { return binary.BigEndian.Uint32(s[44:]) }

// FirstShare returns a SYN_ACK's first-round-trip share, in 65535ths of
// the sender's capacity (ports x line rate).
func (s Setup) FirstShare() uint16 { return binary.BigEndian.Uint16(s[50:]) }

// FirstShareRate returns the first-round-trip share as bytes per second
// (0: none).
func (s Setup) FirstShareRate() float64 {
	return float64(s.FirstShare()) / 65535 * float64(s.Ports()) * float64(s.LineRate()) * 1e6 / 8
}

// SetupFields is a SYN or SYN_ACK as a value.
type SetupFields struct {
	Common
	SrcConn   uint32
	AckDelay  uint32
	Service   uint16
	Nonce     uint64
	Paths     int
	Ports     int
	MTU       int
	MsgWindow int
	DSNWindow int
	LineRate  uint32
	// FirstShare is a SYN_ACK's first_share (0 in a SYN).
	FirstShare uint16
}

// Fields returns the setup fields.
func (s Setup) Fields() SetupFields {
	return SetupFields{Common: Header(s).Common(), SrcConn: s.SrcConn(), AckDelay: s.AckDelay(), Service: s.Service(), Nonce: s.Nonce(),
		Paths: s.Paths(), Ports: s.Ports(), MTU: s.MTU(), MsgWindow: s.MsgWindow(),
		DSNWindow: s.DSNWindow(), LineRate: s.LineRate(), FirstShare: s.FirstShare()}
}

// Put writes the whole setup packet (SetupSize bytes). Values must be in
// range (DecodeSetup's limits); they are truncated to their field widths.
func (s Setup) Put(f *SetupFields) {
	_ = s[SetupSize-1]
	Header(s).Put(&f.Common)
	binary.BigEndian.PutUint32(s[16:], f.SrcConn)
	binary.BigEndian.PutUint32(s[20:], f.AckDelay)
	binary.BigEndian.PutUint64(s[24:], f.Nonce)
	binary.BigEndian.PutUint16(s[32:], uint16(f.Paths))
	s[34], s[35] = uint8(f.Ports), 0
	binary.BigEndian.PutUint16(s[36:], uint16(f.MTU))
	binary.BigEndian.PutUint16(s[38:], uint16(f.MsgWindow))
	binary.BigEndian.PutUint32(s[40:], uint32(f.DSNWindow))
	binary.BigEndian.PutUint32(s[44:], f.LineRate)
	binary.BigEndian.PutUint16(s[48:], f.Service)
	binary.BigEndian.PutUint16(s[50:], f.FirstShare)
}

// DecodeSetup checks a SYN or SYN_ACK as returned by Parse.
func DecodeSetup(b []byte) (Setup, error) {
	if len(b) < SetupSize {
		return nil, ErrLength
	}
	if t := Header(b).Type(); t != TypeSyn && t != TypeSynAck {
		return nil, ErrType
	}
	s := Setup(b)
	switch {
	case s.SrcConn() == 0:
		return nil, ErrSetupConn
	case s.Paths() < 1 || s.Paths() > 256:
		return nil, ErrSetupPaths
	case s.Ports() == 0:
		return nil, ErrSetupPorts
	case s.MTU() < 256 || s.MTU() > 9000:
		return nil, ErrSetupMTU
	case s.MsgWindow() == 0 || s.DSNWindow() == 0:
		return nil, ErrSetupWindow
	}
	return s, nil
}
