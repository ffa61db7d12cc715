// Package verbsabi is the binary interface between a live lab's verbs
// endpoint (labs/uverbs) and its clients (the public verbs package, or a
// program in any language): control messages on a SOCK_SEQPACKET Unix
// socket, and shared-memory rings with eventfd doorbells for the data path.
// docs/verbs-abi.md is its specification, byte by byte; this package is
// that document in Go, shared by both sides so they cannot drift apart.
//
// Everything is little-endian (the endpoint and its clients share one
// machine's memory). Decoders never trust a length or index they read: a
// malformed control message is an error (the endpoint closes that client),
// and shared-memory indices are masked and checked.
package verbsabi

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Version is the ABI version a client and endpoint agree on in HELLO. It
// changes whenever a message, ring or constant changes meaning.
const Version = 1

// SocketName is the endpoint's abstract socket name (without the leading
// NUL byte): "\x00mrlab-verbs". Abstract sockets belong to a network
// namespace, so each lab host has its own endpoint under the same name.
const SocketName = "mrlab-verbs"

// Message limits.
const (
	HeaderSize = 16
	// MaxMessage is the largest control message either side sends.
	MaxMessage = 4096
	// MaxFDs is the most descriptors a message carries.
	MaxFDs = 2
	// MaxErrorText bounds an error reply's text.
	MaxErrorText = 1024
	// ReplyBit marks a reply's op.
	ReplyBit = 0x8000
)

// Op is a control message's operation.
type Op uint16

// Operations. Each request gets exactly one reply with the request's seq
// and op|ReplyBit. CONNECT and ACCEPT reply when the connection is
// established (or fails); every other request replies at once.
const (
	OpHello      Op = 0x01
	OpAllocPD    Op = 0x02
	OpDeallocPD  Op = 0x03
	OpRegMR      Op = 0x04
	OpDeregMR    Op = 0x05
	OpCreateCQ   Op = 0x06
	OpDestroyCQ  Op = 0x07
	OpCreateQP   Op = 0x08
	OpDestroyQP  Op = 0x09
	OpConnect    Op = 0x0A
	OpListen     Op = 0x0B
	OpAccept     Op = 0x0C
	OpStopListen Op = 0x0D
	OpCancel     Op = 0x0E
	OpWatch      Op = 0x0F
	OpUnwatch    Op = 0x10
	OpQueryQP    Op = 0x11
	// OpRegMRAt is REG_MR with the region's address chosen by the client
	// (its iova, as ibv_reg_mr gives a region the buffer's own virtual
	// address) and an offset in the memfd at any byte: added so a
	// libibverbs-compatible client can hand peers its own addresses.
	OpRegMRAt Op = 0x12
	// OpSetRNR sets a QP's RNR policy as ibv_modify_qp sets it: the
	// requester's rnr_retry (7: forever) and the RNR timer code its
	// responder puts in RNR NAKs (min_rnr_timer). Added for the
	// libibverbs-compatible client; a QP that never gets one keeps the
	// lab's transport defaults.
	OpSetRNR Op = 0x13
	opMax    Op = 0x13
)

var opNames = [...]string{"", "HELLO", "ALLOC_PD", "DEALLOC_PD", "REG_MR", "DEREG_MR", "CREATE_CQ", "DESTROY_CQ",
	"CREATE_QP", "DESTROY_QP", "CONNECT", "LISTEN", "ACCEPT", "STOP_LISTEN", "CANCEL", "WATCH", "UNWATCH", "QUERY_QP", "REG_MR_AT", "SET_RNR"}

func (o Op) String() string {
	r := ""
	if o&ReplyBit != 0 {
		r, o = " reply", o&^ReplyBit
	}
	if o >= 1 && o <= opMax {
		return opNames[o] + r
	}
	return fmt.Sprintf("op %#x%s", uint16(o), r)
}

// Code is a reply's status: 0 for success, otherwise why the request
// failed. An error reply's body is a UTF-8 message for people.
type Code uint32

// Status codes.
const (
	CodeOK Code = iota
	// CodeMalformed: the message could not be decoded. The endpoint
	// closes the client after this reply.
	CodeMalformed
	// CodeVersion: the endpoint does not speak the client's ABI version.
	CodeVersion
	// CodeNotPermitted: the client is not in the endpoint's host (its
	// network namespace differs), or sent a request before HELLO.
	CodeNotPermitted
	// CodeNoObject: a handle names no object of this client.
	CodeNoObject
	// CodeInvalid: an argument is out of range.
	CodeInvalid
	// CodeLimit: a per-process limit would be exceeded.
	CodeLimit
	// CodeBusy: the object is in use (a port listened on, a CQ a QP uses).
	CodeBusy
	// CodeConnFailed: the connection could not be set up.
	CodeConnFailed
	// CodeCanceled: CANCEL (or the QP's destruction) ended the request.
	CodeCanceled
	// CodeBadMemory: the memory passed to REG_MR is unusable (not a memfd
	// sealed against shrinking, shorter than asked, or not mappable).
	CodeBadMemory
	// CodeShutdown is reserved: a stopping lab closes its clients'
	// sockets instead.
	CodeShutdown
	// CodeNoTransport: the lab's NICs do not speak that transport.
	CodeNoTransport
	numCodes
)

var codeNames = [numCodes]string{"ok", "malformed message", "ABI version not supported", "not permitted",
	"no such object", "invalid argument", "limit exceeded", "busy", "connection failed", "canceled",
	"unusable memory", "lab shutting down", "no such transport"}

func (c Code) String() string {
	if c < numCodes {
		return codeNames[c]
	}
	return fmt.Sprintf("code %d", uint32(c))
}

// Header is a view of a control message's 16-byte header:
//
//	0  u16 op
//	2  u16 flags   0
//	4  u32 seq     chosen by the client, echoed in the reply
//	8  u32 status  0 in requests; a Code in replies
//	12 u32 len     bytes of body after the header
type Header []byte

// Op returns the operation.
func (h Header) Op() Op { return Op(binary.LittleEndian.Uint16(h[0:])) }

// Flags returns the flags (0 in this version).
func (h Header) Flags() uint16 { return binary.LittleEndian.Uint16(h[2:]) }

// Seq returns the sequence number.
func (h Header) Seq() uint32 { return binary.LittleEndian.Uint32(h[4:]) }

// Status returns the status.
func (h Header) Status() Code { return Code(binary.LittleEndian.Uint32(h[8:])) }

// Len returns the body length.
func (h Header) Len() uint32 { return binary.LittleEndian.Uint32(h[12:]) }

// AppendHeader appends a header to b.
func AppendHeader(b []byte, op Op, seq uint32, status Code, bodyLen int) []byte {
	b = binary.LittleEndian.AppendUint16(b, uint16(op))
	b = binary.LittleEndian.AppendUint16(b, 0)
	b = binary.LittleEndian.AppendUint32(b, seq)
	b = binary.LittleEndian.AppendUint32(b, uint32(status))
	return binary.LittleEndian.AppendUint32(b, uint32(bodyLen))
}

// Errors from decoding.
var (
	ErrShort    = errors.New("verbs ABI: message shorter than its header or body")
	ErrLength   = errors.New("verbs ABI: body length wrong for the operation")
	ErrOp       = errors.New("verbs ABI: unknown operation")
	ErrFlags    = errors.New("verbs ABI: nonzero flags, status or reserved field")
	ErrFDs      = errors.New("verbs ABI: wrong number of descriptors for the operation")
	ErrTooLarge = errors.New("verbs ABI: message longer than MaxMessage")
)

// SplitMessage checks a whole message's framing and returns its header and
// body.
func SplitMessage(msg []byte) (Header, []byte, error) {
	if len(msg) > MaxMessage {
		return nil, nil, ErrTooLarge
	}
	if len(msg) < HeaderSize {
		return nil, nil, ErrShort
	}
	h := Header(msg[:HeaderSize])
	if uint64(h.Len()) != uint64(len(msg)-HeaderSize) {
		return nil, nil, ErrShort
	}
	if h.Flags() != 0 {
		return nil, nil, ErrFlags
	}
	return h, msg[HeaderSize:], nil
}

// Access flags in REG_MR (ibv_access_flags' values).
const (
	AccessLocalWrite  = 1 << 0
	AccessRemoteWrite = 1 << 1
	AccessRemoteRead  = 1 << 2
	accessAll         = AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead
)

// Transports in CREATE_QP and HELLO's transport mask.
const (
	TransportMetaRoCE = 1
	TransportRoCEv2   = 2
)

// SET_RNR's mask: which of its fields to apply.
const (
	RNRSetRetry = 1 << 0 // rnr_retry
	RNRSetTimer = 1 << 1 // min_rnr_timer
	// RNRRetryForever is the rnr_retry that never gives up, as in IB.
	RNRRetryForever = 7
	// MaxRNRTimer is the largest RNR timer code (IBTA table 45).
	MaxRNRTimer = 31
)

// QP states, in the send ring's state word.
const (
	QPReset       = 0 // created, not connected
	QPConnecting  = 1
	QPEstablished = 2
	QPClosed      = 3
	QPError       = 4
)
