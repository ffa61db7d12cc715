package conformance

import (
	"fmt"
	"reflect"
	"strings"
	"unicode"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/metaroce"
	"github.com/mrlab/mrlab/transport/transporttest"
)

// The IUT's memory, the same for every implementation (docs/conformance.md,
// "The IUT's side"): regions, keys and initial contents.
const (
	// KeyRW: 1 MiB at AddrRW, remote write, remote read and local write;
	// zero-filled.
	KeyRW  = 0x100
	AddrRW = 0x10000000
	SizeRW = 1 << 20
	// KeyRO: 64 KiB at AddrRO, remote read only; pattern seed 9.
	KeyRO  = 0x200
	AddrRO = 0x20000000
	SizeRO = 64 << 10
	// KeyRecv: 1 MiB at AddrRcv, local write only (receive buffers, READ
	// sinks); zero-filled.
	KeyRecv = 0x300
	AddrRcv = 0x30000000
	SizeRcv = 1 << 20
	// KeySrc: 256 KiB at AddrSrc, local only: the source of the IUT's
	// WRITEs and SENDs; pattern seed 5.
	KeySrc  = 0x400
	AddrSrc = 0x40000000
	SizeSrc = 256 << 10

	seedRO  = 9
	seedSrc = 5

	// TesterConn is the tester's connection id.
	TesterConn = 0x7e57
)

// newMemory registers the IUT's regions.
func newMemory() *transporttest.Memory {
	m := transporttest.NewMemory()
	ro := make([]byte, SizeRO)
	for i := range ro {
		ro[i] = pattern(seedRO, i)
	}
	src := make([]byte, SizeSrc)
	for i := range src {
		src[i] = pattern(seedSrc, i)
	}
	m.Register(KeyRW, AddrRW, make([]byte, SizeRW), transport.AccessLocalWrite|transport.AccessRemoteWrite|transport.AccessRemoteRead)
	m.Register(KeyRO, AddrRO, ro, transport.AccessRemoteRead)
	m.Register(KeyRecv, AddrRcv, make([]byte, SizeRcv), transport.AccessLocalWrite)
	m.Register(KeySrc, AddrSrc, src, 0)
	return m
}

// engineSettings turns a script's "iut:" settings into the engine's
// options and NIC shape. Unknown settings are an error.
func engineSettings(set map[string]uint64) (metaroce.Options, int, error) {
	var o metaroce.Options
	ports := 1
	for k, v := range set {
		n := int(v)
		switch k {
		case "paths":
			o.Paths = n
		case "ports":
			ports = n
		case "ackevery":
			o.AckEvery = n
		case "ackdelay":
			o.AckDelay = sim.Time(v)
		case "rnr_retries":
			o.RNRRetries = n
		case "rnr_delay":
			o.RNRDelay = sim.Time(v)
		case "max_retries":
			o.MaxRetries = n
		case "setup_timeout":
			o.SetupTimeout = sim.Time(v)
		case "rto_max":
			o.RTOMax = sim.Time(v)
		case "recv_queue":
			o.RecvQueue = n
		case "send_queue":
			o.SendQueue = n
		case "nohint":
			o.DisableRateHint = v != 0
		case "mutations":
			o.Faults = metaroce.Mutation(v)
		default:
			return o, 0, fmt.Errorf("unknown iut setting %q", k)
		}
	}
	if ports < 1 || ports > 8 {
		return o, 0, fmt.Errorf("iut setting ports=%d not in 1..8", ports)
	}
	return o, ports, nil
}

// workRequest builds the IUT's work request for an action. Defaults: the
// IUT's source region for what it sends, its receive region for what it
// receives, the tester's address 0x1000 with key 0x55 on the far side.
func workRequest(verb string, a map[string]uint64) (*transport.WorkRequest, bool, error) {
	get := func(k string, d uint64) uint64 {
		if v, ok := a[k]; ok {
			return v
		}
		return d
	}
	wr := &transport.WorkRequest{ID: get("id", 1), Stream: uint16(get("stream", 0)), NumSGE: 1,
		RemoteAddr: get("raddr", 0x1000), RKey: uint32(get("rkey", 0x55)), Imm: uint32(get("imm", 0))}
	n := uint32(get("len", 1024))
	recv := false
	switch verb {
	case "write":
		wr.Op = transport.OpWrite
	case "write_imm":
		wr.Op = transport.OpWriteImm
	case "send":
		wr.Op = transport.OpSend
	case "send_imm":
		wr.Op = transport.OpSendImm
	case "read":
		wr.Op = transport.OpRead
		wr.SGL[0] = transport.SGE{Addr: get("laddr", AddrRcv), Len: n, LKey: uint32(get("lkey", KeyRecv))}
		return wr, false, nil
	case "recv":
		wr.Op = transport.OpRecv
		wr.SGL[0] = transport.SGE{Addr: get("laddr", AddrRcv), Len: n, LKey: uint32(get("lkey", KeyRecv))}
		recv = true
		return wr, recv, nil
	default:
		return nil, false, fmt.Errorf("%s is not a work request", verb)
	}
	wr.SGL[0] = transport.SGE{Addr: get("laddr", AddrSrc), Len: n, LKey: uint32(get("lkey", KeySrc))}
	return wr, false, nil
}

// statusNames are the completion statuses scripts name.
var statusNames = map[string]transport.Status{
	"ok": transport.StatusOK, "local_protection": transport.StatusLocalProtection,
	"remote_access": transport.StatusRemoteAccess, "remote_invalid": transport.StatusRemoteInvalidRequest,
	"rnr_retry_exceeded": transport.StatusRNRRetryExceeded, "retry_exceeded": transport.StatusRetryExceeded,
	"flushed": transport.StatusFlushed, "local_length": transport.StatusLocalLength,
}

// opNames are the completion opcodes scripts name.
var opNames = map[string]transport.Op{
	"WRITE": transport.OpWrite, "WRITE_IMM": transport.OpWriteImm, "SEND": transport.OpSend,
	"SEND_IMM": transport.OpSendImm, "READ": transport.OpRead, "RECV": transport.OpRecv, "RECV_IMM": transport.OpRecvImm,
}

// Completion is a work completion at the IUT, as scripts match it.
type Completion struct {
	ID     uint64 `json:"id"`
	Op     string `json:"op"`
	Status string `json:"status"`
	Stream uint16 `json:"stream"`
	Bytes  uint32 `json:"bytes"`
	Imm    uint32 `json:"imm"`
	HasImm bool   `json:"has_imm"`
}

func completionOf(wc transport.Completion) Completion {
	c := Completion{ID: wc.ID, Op: wc.Op.String(), Stream: wc.Stream, Bytes: wc.Bytes, Imm: wc.Imm, HasImm: wc.HasImm}
	for n, s := range statusNames {
		if s == wc.Status {
			c.Status = n
		}
	}
	return c
}

// counters reads the engine's connection counters by snake_case name
// (DropChecksum: drop_checksum).
func counters(st metaroce.ConnStats) map[string]uint64 {
	out := map[string]uint64{}
	v := reflect.ValueOf(st)
	for i := 0; i < v.NumField(); i++ {
		f := v.Field(i)
		if f.Kind() != reflect.Uint64 {
			continue
		}
		out[snake(v.Type().Field(i).Name)] = f.Uint()
	}
	return out
}

func snake(s string) string {
	var b strings.Builder
	rs := []rune(s)
	for i, r := range rs {
		if unicode.IsUpper(r) && i > 0 && (unicode.IsLower(rs[i-1]) || i+1 < len(rs) && unicode.IsLower(rs[i+1])) {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}
