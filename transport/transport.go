// Package transport defines the boundary between mrlab's software NIC and its
// RDMA transports (MetaRoCE in transport/metaroce, the RoCEv2 baseline in
// transport/rocev2).
//
// Transports are sans-I/O: a connection takes received transport payloads
// (the bytes after the UDP header) and the current time, and produces
// transport payloads to send, timers, and completions. It never reads a clock,
// starts a goroutine or touches a socket; the NIC (package softnic) frames
// what it produces into IPv4/UDP, schedules its deadline on the event loop and
// hands completions to completion queues.
package transport

import (
	"errors"
	"math/rand/v2"

	"github.com/mrlab/mrlab/internal/sim"
)

// Kind names a transport.
type Kind uint8

// Transports.
const (
	MetaRoCE Kind = iota + 1
	RoCEv2
)

// String returns "metaroce" or "rocev2".
func (k Kind) String() string {
	switch k {
	case MetaRoCE:
		return "metaroce"
	case RoCEv2:
		return "rocev2"
	}
	return "unknown"
}

// ParseKind parses "metaroce" or "rocev2".
func ParseKind(s string) (Kind, error) {
	switch s {
	case "metaroce":
		return MetaRoCE, nil
	case "rocev2":
		return RoCEv2, nil
	}
	return 0, errors.New("unknown transport " + s + " (want metaroce or rocev2)")
}

// Access is a set of memory-region permissions, as in ibv_access_flags.
type Access uint8

// Access flags.
const (
	AccessLocalWrite Access = 1 << iota
	AccessRemoteWrite
	AccessRemoteRead
)

// Memory is the NIC's DMA engine as a transport sees it: the memory-region
// table behind permission checks, gathers into packets and placements out
// of them. Transports move payload only through Read and Write, so a bad
// key or an out-of-bounds access never touches memory, and the NIC is free
// to represent memory and payload as it likes (real bytes, or synthetic
// content that is checked exactly without being stored or copied).
//
// Read and Write take slices of the packet being built or received (the
// buffer Transmit was given, the payload Receive was given), not copies
// of them: a NIC in synthetic payload mode tracks content by where it
// lies in the packet.
type Memory interface {
	// Check reports whether n bytes at addr in the region named by key
	// may be accessed with the given permissions, touching nothing.
	Check(key uint32, addr uint64, n int, access Access) Status
	// Read gathers len(dst) bytes at addr of region key into dst, a
	// slice of the packet being built.
	Read(dst []byte, key uint32, addr uint64, access Access) Status
	// Write places src, a slice of a received packet, at addr of region
	// key.
	Write(key uint32, addr uint64, src []byte, access Access) Status
}

// ZeroSpanner is implemented by a Memory that knows which bytes of a
// packet are zeros standing for memory content (a NIC in synthetic payload
// mode: its DMA describes such a payload instead of copying it, and a
// received payload that travelled header-only was made of zeros), so a
// transport can checksum them in closed form instead of reading them, and
// need not have them written at all.
//
// ZeroSpan alone is only a shortcut: after Read the bytes are zeros either
// way, and a transport that ignores it computes the same checksum.
// ReadLazy is Read for a transport that keeps ZeroSpan's side of the
// bargain: the NIC need not write the zeros (4 KiB per data packet) when
// the packet travels header-only and nothing reads them.
type ZeroSpanner interface {
	// ZeroSpan reports a span [at, at+n) of b, a slice of the packet
	// being built (after Read or ReadLazy) or received (during Receive),
	// whose bytes are all zero; n is 0 when it knows of none. On the
	// packet being built, every byte of b outside the span holds its
	// value when ZeroSpan returns (zeros ReadLazy left unwritten there
	// are written), and the span's zeros are written, or the span
	// elided, when the packet leaves the transport.
	ZeroSpan(b []byte) (at, n int)
	// ReadLazy is Read, except that bytes of dst standing for zeros may
	// be left unwritten. The caller asks ZeroSpan about the packet (a b
	// that begins it and covers dst) after its last ReadLazy and before
	// it reads any byte of dst or returns the packet, and writes nothing
	// into the span ZeroSpan reports; bytes of dst past that b are its
	// own to write (a trailer) or to leave out of the packet.
	ReadLazy(dst []byte, key uint32, addr uint64, access Access) Status
}

// Status is a work completion's outcome (ibv_wc_status, abridged).
type Status uint8

// Completion statuses.
const (
	StatusOK Status = iota
	// StatusLocalProtection: the local SGE named a bad lkey or range.
	StatusLocalProtection
	// StatusRemoteAccess: the peer refused the rkey, range or permission.
	StatusRemoteAccess
	// StatusRemoteInvalidRequest: the peer could not parse or place the request.
	StatusRemoteInvalidRequest
	// StatusRNRRetryExceeded: the peer had no posted receive, for too long.
	StatusRNRRetryExceeded
	// StatusRetryExceeded: the transport gave up retransmitting.
	StatusRetryExceeded
	// StatusFlushed: the connection closed or failed before the request ran.
	StatusFlushed
	// StatusLocalLength: a received SEND was longer than the posted receive.
	StatusLocalLength
)

var statusNames = [...]string{"ok", "local protection error", "remote access error",
	"remote invalid request", "RNR retry exceeded", "retry exceeded", "flushed", "local length error"}

// String describes the status as ibv_wc_status_str would.
func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return "unknown status"
}

// Op is a work request's operation.
type Op uint8

// Operations.
const (
	OpWrite Op = iota + 1
	OpWriteImm
	OpSend
	OpSendImm
	OpRead
	OpRecv // a receive completion (posted with PostRecv)
	OpRecvImm
)

var opNames = [...]string{"", "WRITE", "WRITE_IMM", "SEND", "SEND_IMM", "READ", "RECV", "RECV_IMM"}

// String returns the operation's verbs name, e.g. "WRITE_IMM".
func (o Op) String() string {
	if int(o) < len(opNames) && o != 0 {
		return opNames[o]
	}
	return "OP?"
}

// SGE is one scatter-gather element: a range of a local memory region.
type SGE struct {
	Addr uint64
	Len  uint32
	LKey uint32
}

// MaxSGE is the largest scatter-gather list a work request may carry.
const MaxSGE = 4

// WorkRequest is what an application posts: ibv_send_wr / ibv_recv_wr.
type WorkRequest struct {
	ID     uint64 // returned in the completion
	Op     Op
	Stream uint16 // ordered stream within the connection (MetaRoCE); 0 for RoCEv2
	SGL    [MaxSGE]SGE
	NumSGE int
	// RemoteAddr and RKey name the peer's memory for WRITE and READ.
	RemoteAddr uint64
	RKey       uint32
	Imm        uint32 // for OpWriteImm and OpSendImm
}

// Len returns the total length of the scatter-gather list.
func (w *WorkRequest) Len() int {
	n := 0
	for i := 0; i < w.NumSGE; i++ {
		n += int(w.SGL[i].Len)
	}
	return n
}

// Completion is a work completion: ibv_wc.
type Completion struct {
	ID     uint64
	Op     Op
	Status Status
	Stream uint16
	Bytes  uint32
	Imm    uint32
	HasImm bool
}

// TxMeta says how the NIC must frame a payload a connection produced.
type TxMeta struct {
	// SrcPort is the UDP source port: the path's ECMP entropy.
	SrcPort uint16
	// ECT asks for ECT(0) in the IPv4 header (ECN-capable transport).
	ECT bool
}

// RxMeta is what the NIC read from the IPv4/UDP headers of a received packet.
type RxMeta struct {
	Port    int    // NIC port (plane) the packet arrived on
	SrcPort uint16 // UDP source port
	CE      bool   // IPv4 ECN field was CE
}

// Conn is one end of a transport connection.
//
// The NIC calls Transmit whenever one of its ports can send, Receive for
// every packet demultiplexed to the connection, and OnTimer when the
// connection's deadline passes; after each of these (and after Post*) it
// reads Deadline and re-arms the connection's single timer. A Conn is not safe
// for concurrent use.
type Conn interface {
	// PostSend queues a WRITE, SEND or READ. Errors are immediate refusals
	// (queue full, connection closed, bad opcode); outcomes that depend on the
	// peer arrive as completions.
	PostSend(now sim.Time, wr *WorkRequest) error
	// PostRecv queues a receive buffer for incoming SENDs.
	PostRecv(now sim.Time, wr *WorkRequest) error
	// Receive processes one transport payload. Malformed payloads are
	// counted and dropped, never a panic.
	Receive(now sim.Time, payload []byte, rx RxMeta)
	// Transmit writes the next packet this connection wants to send on the
	// given NIC port into b (whose length is the largest payload allowed) and
	// returns its length; 0 means nothing to send on that port now (window,
	// pacing, or nothing queued).
	Transmit(now sim.Time, port int, b []byte) (int, TxMeta)
	// Deadline returns when the connection next needs OnTimer or may be able
	// to Transmit again after pacing, or sim.Never.
	Deadline() sim.Time
	// OnTimer runs timer-driven work (retransmission timeouts, probes,
	// pacing release, delayed ACKs).
	OnTimer(now sim.Time)
	// Close starts teardown; queued requests complete with StatusFlushed.
	Close(now sim.Time)
	// State reports where the connection is in its life.
	State() State
	// LocalID returns this end's connection id (MetaRoCE) or QPN (RoCEv2).
	LocalID() uint32
	StatsReporter
}

// State is a connection's life-cycle state.
//
//	Connecting --setup done--> Established --Close / peer close--> Closed
//	     \--------------------- fatal error -----------------------> Error
type State uint8

// Connection states.
const (
	StateConnecting State = iota
	StateEstablished
	StateClosed
	StateError
)

// String returns the state's name.
func (s State) String() string {
	return [...]string{"connecting", "established", "closed", "error"}[s]
}

// Config is what every connection needs from its NIC.
type Config struct {
	// LocalID is the id the NIC allocated for this end (unique per NIC).
	LocalID uint32
	// Ports is the number of NIC ports (one per plane).
	Ports int
	// LineRate is each port's rate in bits per second.
	LineRate float64
	// PathMTU is the largest RDMA payload carried by one packet, as an IB
	// path MTU (256..4096, default 4096). Transmit's buffer always has room
	// for PathMTU plus the transport's own headers and trailer (HeaderRoom).
	PathMTU int
	// Memory resolves memory keys for placement and for local SGEs.
	Memory Memory
	// Complete receives every completion, in the order the application must
	// see them.
	Complete func(Completion)
	// Rand is the connection's own random stream (entropy values, jitter).
	Rand *rand.Rand
	// Trace, if non-nil, receives the transport's decisions for the protocol
	// trace. Implementations must not format anything when it is nil.
	Trace Tracer
	// Service is the service (rdma_cm's port) a dialer asks the peer's NIC
	// for in its setup request; the peer hands the request to the listener
	// of that service. 0 is the service the in-lab workloads use.
	// Acceptors ignore it.
	Service uint16
	// PinPort binds a single-path connection (a RoCEv2 QP) to NIC port
	// Port, as ibv_modify_qp's port_num binds a QP to a port of a
	// multi-port HCA; without it the transport picks the port. Multipath
	// transports ignore both.
	PinPort bool
	Port    int
}

// HeaderRoom is the most header and trailer bytes any transport adds to a
// packet's RDMA payload; NICs size Transmit buffers as PathMTU+HeaderRoom.
const HeaderRoom = 128

// Tracer receives human-readable protocol decisions, e.g.
// "path 9: SACK hole psn 1834, retransmit". now is the decision's time.
type Tracer interface {
	Tracef(now sim.Time, conn uint32, format string, args ...any)
}

// Errors returned by Post*. ErrClosed is transport's own sentinel, so the
// sans-I/O floors (transport/, softnic/) import no net; the live boundary
// (labs/uverbs) turns it into the verbs error a program sees.
var (
	ErrQueueFull    = errors.New("transport: send queue full")
	ErrClosed       = errors.New("transport: connection closed")
	ErrBadRequest   = errors.New("transport: bad work request")
	ErrNotConnected = errors.New("transport: connection not established")
)

// ServiceReader is implemented by protocols whose setup requests carry a
// service (Config.Service). The NIC calls SetupService on a payload Demux
// called a setup request to pick the listener; a NIC treats the requests
// of protocols without it as asking for service 0.
type ServiceReader interface {
	SetupService(payload []byte) uint16
}

// Handshaker is implemented by connections whose passive end is
// Established before its dialer has proven it heard the answer (MetaRoCE
// answers a SYN Established; its dialer's EST or first packet confirms).
// A NIC hands a passive connection to its listener only once
// HandshakeDone; for other transports, once it is Established.
type Handshaker interface {
	HandshakeDone() bool
}

// Aborter is implemented by connections that can be dropped silently: the
// connection moves to Error, sends nothing more (no teardown message),
// and leaves its protocol's tables. A NIC aborts half-open passive
// connections it evicts.
type Aborter interface {
	Abort(now sim.Time)
}

// ControlTransmitter is implemented by connections that can send their
// control packets (ACKs, NAKs, CNPs, handshake and teardown messages) on
// their own, apart from data. A NIC serves control packets ahead of data,
// as NICs do (the responder's ACK/NAK and CNP generation has its own
// queue, served before the send queues' data WQEs): an ACK never waits
// behind other connections' data on its port.
//
// TransmitControl is Transmit restricted to control: it writes the next
// control packet the connection has for port into b (0: none now) and
// never sends data, a probe or a read response. Transmit still sends
// control first, so a NIC that never calls TransmitControl loses
// nothing but the priority.
type ControlTransmitter interface {
	TransmitControl(now sim.Time, port int, b []byte) (int, TxMeta)
}

// ControlPender is implemented by control transmitters that can say,
// without doing anything, that they have no control packet for a port:
// ControlPending(port) false promises that TransmitControl(now, port, b)
// would now write nothing and change nothing, so a NIC need not ask (nor
// take a buffer to ask with). True means there may be one: the NIC asks.
// Most offers of a connection to a port's control queue find nothing (a
// connection is offered after every event, its ACKs are due after a few
// arrivals): at 128 hosts 97,000 refused asks a run, about 400
// instructions each.
type ControlPender interface {
	ControlPending(port int) bool
}

// Waker is implemented by connections that can come to owe a packet
// through another connection's event, with no call of the NIC into them
// (MetaRoCE's acceptor lowers an earlier dialer's first grant when a new
// one dials: §9 of docs/metaroce-wire.md). A NIC calls SetWake once, when
// it attaches the connection, with a function the transport may call
// from within any call of the NIC into any of its connections: the NIC
// then treats the woken connection as after a call into it (re-arms its
// timer, offers it every port) once that call returns, never during it.
// A transport whose NIC never calls SetWake must not rely on being woken.
type Waker interface {
	SetWake(wake func())
}

// TransmitPender is ControlPender for Transmit: TransmitPending(port)
// false promises that Transmit(now, port, b) would now write nothing and
// change nothing, so a NIC need not ask. It may say true when Transmit
// then sends nothing (a window or pacer that holds the data is the
// transport's to find out, at the moment it is asked); what it must
// never do is say false when Transmit would send or change something. A
// receive-only connection is offered its ports after each arrival:
// about 60,000 refused asks a run at 128 hosts.
type TransmitPender interface {
	TransmitPending(port int) bool
}

// PortWatcher is implemented by multipath connections that act on their
// NIC's local port state: a NIC calls SetPortsUp with bit i set for each
// port whose link is up, when a connection is created and whenever a
// port's link goes down or comes back. A transport that is not told
// assumes every port is up.
type PortWatcher interface {
	SetPortsUp(now sim.Time, up uint32)
}

// RNRPolicy is implemented by connections whose receiver-not-ready
// policy a verbs client sets per QP, as ibv_modify_qp's rnr_retry and
// min_rnr_timer do. SetRNR may be called at any time; it applies from the
// next RNR NAK on.
type RNRPolicy interface {
	// SetRNRRetry sets how many RNR NAKs in a row the requester accepts
	// before failing with StatusRNRRetryExceeded: 0..6, or 7 for forever
	// (IB's encoding).
	SetRNRRetry(retry int)
	// SetMinRNRTimer sets the RNR timer code (IBTA table 45, 0..31) this
	// end's responder asks its peer to wait in RNR NAKs. A transport whose
	// NAKs carry no timer ignores it.
	SetMinRNRTimer(code uint8)
}

// Protocol is one transport as a NIC's demultiplexer sees it. A NIC makes one
// Protocol per transport it speaks; NIC-wide transport state (MetaRoCE's
// receiver fair-share allocator) lives in it.
type Protocol interface {
	Kind() Kind
	// UDPPort is the UDP destination port the transport's packets use.
	UDPPort() uint16
	// Demux returns the local connection id a payload is addressed to.
	// setup is true for a connection request, which has no local id yet.
	// A malformed payload returns an error (the NIC counts and drops it).
	Demux(payload []byte) (id uint32, setup bool, err error)
	// Dial opens a connection; it sends its own setup request when it is
	// first asked to Transmit.
	Dial(now sim.Time, cfg Config) (Conn, error)
	// Accept opens the passive end from a setup request.
	Accept(now sim.Time, cfg Config, payload []byte, rx RxMeta) (Conn, error)
}
