package conformance

import (
	"fmt"
	"math/bits"
	"sort"
	"strconv"
	"strings"

	"github.com/mrlab/mrlab/transport/metaroce/wire"
)

// typeByName maps a script's packet type name to the wire type.
func typeByName(s string) (wire.Type, bool) {
	for t := wire.TypeWrite; t <= wire.TypeCloseAck; t++ {
		if t.String() == s {
			return t, true
		}
	}
	return 0, false
}

// flagNames are the one-bit pseudo-fields for the common header's flags.
var flagNames = map[string]wire.Flags{
	"first": wire.FlagFirst, "last": wire.FlagLast, "ackreq": wire.FlagAckReq, "retx": wire.FlagRetx,
	"hasimm": wire.FlagImm, "abort": wire.FlagAbort, "ece": wire.FlagECE, "busy": wire.FlagBusy,
	"revise": wire.FlagRevise,
}

// Sent is a packet the IUT sent, as the tester saw it.
type Sent struct {
	At      int64  // ns since the test started
	Port    int    // IUT NIC port it left by (sim; 0 over UDP)
	SrcPort uint16 // UDP source port (the path entropy)
	ECT     bool   // IPv4 ECN field was ECT(0) or ECT(1)
	Bytes   []byte // the MetaRoCE packet (common header to CRC trailer)
}

// view is a decoded IUT packet: every named field a script can match.
type view struct {
	typ     wire.Type
	f       map[string]uint64
	sack    [4]uint64 // the ACK's fixed part
	records []wire.PathAck
	payload []byte
	err     error // why the packet is malformed, if it is
}

// decode reads every field of a packet the IUT sent. A malformed packet
// gets err set (a conformance failure when a script matches it).
func decode(s *Sent) *view {
	v := &view{f: map[string]uint64{"sport": uint64(s.SrcPort), "port": uint64(s.Port),
		"size": uint64(len(s.Bytes)), "ect": b2u(s.ECT)}}
	if len(s.Bytes) < wire.CommonSize+wire.TrailerSize {
		v.err = wire.ErrShort
		return v
	}
	h := wire.Header(s.Bytes)
	v.typ = h.Type()
	c := h.Common()
	v.f["version"] = uint64(h.Version())
	v.f["flags"] = uint64(c.Flags)
	for n, bit := range flagNames {
		v.f[n] = b2u(c.Flags&bit != 0)
	}
	v.f["path"], v.f["gen"], v.f["dst_conn"] = uint64(c.Path), uint64(c.Gen), uint64(c.DstConn)
	v.f["psn"], v.f["ts"] = uint64(c.PSN), uint64(c.TS)
	typ, body, err := wire.Parse(s.Bytes)
	if err != nil {
		v.err = err
		return v
	}
	switch {
	case typ.IsData():
		d, err := wire.DecodeData(body)
		if err != nil {
			v.err = err
			return v
		}
		f := d.Fields()
		for k, x := range map[string]uint64{"stream": uint64(f.Stream), "stream_prev": uint64(f.StreamPrev),
			"msn": uint64(f.MSN), "msn_base": uint64(f.MSNBase), "dsn": uint64(f.DSN), "msg_len": uint64(f.MsgLen),
			"offset": uint64(f.Offset), "addr": f.Addr, "key": uint64(f.Key), "token": uint64(f.Token),
			"imm": uint64(f.Imm), "demand": uint64(f.Demand), "len": uint64(len(d.Payload()))} {
			v.f[k] = x
		}
		v.payload = d.Payload()
	case typ == wire.TypeAck:
		a, err := wire.DecodeAck(body)
		if err != nil {
			v.err = err
			return v
		}
		f := a.Fields()
		v.sack = f.SACK
		for k, x := range map[string]uint64{"cum": uint64(f.PSN), "echo_ts": uint64(f.EchoTS),
			"ce_count": uint64(f.CECount), "rx_count": uint64(f.RxCount), "rate_hint": uint64(f.RateHint),
			"records": uint64(f.Records)} {
			v.f[k] = x
		}
		off := wire.AckSize
		for i := 0; i < a.Records(); i++ {
			var r wire.PathAck
			r, off = a.Record(off)
			v.records = append(v.records, r)
		}
	case typ == wire.TypeNak:
		n, err := wire.DecodeNak(body)
		if err != nil {
			v.err = err
			return v
		}
		f := n.Fields()
		for k, x := range map[string]uint64{"reason": uint64(f.Reason), "stream": uint64(f.Stream),
			"msn": uint64(f.MSN), "dsn": uint64(f.DSN), "echo_ts": uint64(f.EchoTS)} {
			v.f[k] = x
		}
	case typ == wire.TypeSyn || typ == wire.TypeSynAck:
		st, err := wire.DecodeSetup(body)
		if err != nil {
			v.err = err
			return v
		}
		f := st.Fields()
		for k, x := range map[string]uint64{"src_conn": uint64(f.SrcConn), "ack_delay": uint64(f.AckDelay),
			"nonce": f.Nonce, "paths": uint64(f.Paths), "ports": uint64(f.Ports), "mtu": uint64(f.MTU),
			"msg_window": uint64(f.MsgWindow), "dsn_window": uint64(f.DSNWindow), "line_rate": uint64(f.LineRate),
			"first_share": uint64(f.FirstShare)} {
			v.f[k] = x
		}
	}
	return v
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// sackBits is a SACK vector as a list of set bit indexes.
func sackBits(s *[4]uint64) []int {
	var out []int
	for w, x := range s {
		for x != 0 {
			b := bits.LeadingZeros64(x)
			out = append(out, w*64+b)
			x &^= 1 << (63 - b)
		}
	}
	return out
}

// parseSACK reads a bit list: "-" (none) or comma-separated indexes and
// ranges a-b, each 0..255.
func parseSACK(s string) ([4]uint64, error) {
	var v [4]uint64
	if s == "-" {
		return v, nil
	}
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return v, fmt.Errorf("sack bit %q is not a number", lo)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil {
				return v, fmt.Errorf("sack bit %q is not a number", hi)
			}
		}
		if a < 0 || b > 255 || b < a {
			return v, fmt.Errorf("sack bits %q not in 0..255", part)
		}
		for i := a; i <= b; i++ {
			v[i/64] |= 1 << (63 - i%64)
		}
	}
	return v, nil
}

func fmtSACK(s *[4]uint64) string {
	bs := sackBits(s)
	if len(bs) == 0 {
		return "-"
	}
	var parts []string
	for i := 0; i < len(bs); {
		j := i
		for j+1 < len(bs) && bs[j+1] == bs[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, strconv.Itoa(bs[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", bs[i], bs[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

// String prints a decoded packet the way a script would match it.
func (v *view) String() string {
	var b strings.Builder
	b.WriteString(v.typ.String())
	keys := make([]string, 0, len(v.f))
	for k := range v.f {
		if _, isFlag := flagNames[k]; isFlag && v.f[k] == 0 {
			continue
		}
		if k == "flags" || k == "size" || k == "ect" || k == "port" {
			continue
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%d", k, v.f[k])
	}
	if v.typ == wire.TypeAck {
		fmt.Fprintf(&b, " sack=%s", fmtSACK(&v.sack))
		for i, r := range v.records {
			fmt.Fprintf(&b, " r%d=[path=%d gen=%d cum=%d sack=%s ece=%d]", i, r.Path, r.Gen, r.Cum, fmtSACK(&r.SACK), b2u(r.ECE))
		}
	}
	if v.err != nil {
		fmt.Fprintf(&b, " MALFORMED(%v)", v.err)
	}
	return b.String()
}

// pattern is the payload byte at message offset off for seed s: what the
// tester writes and what memory checks expect. It is byte off%8 of word
// off/8 of a keyed counter-mode PRNG (the words scramble(key + i*step), as
// softnic's content streams): it repeats at no stride, so a chunk placed
// at, or read from, a wrong offset — 4 KiB or any power of two off —
// never checks out (the old (7i + 13S + 1) mod 256 repeated every 256
// bytes).
func pattern(seed uint64, off int) byte {
	z := seed*0x9e3779b97f4a7c15 + 0x6a09e667f3bcc909
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	key := z ^ z>>31
	x := key + uint64(off/8)*0x9e3779b97f4a7c15
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 29
	return byte(x >> (8 * uint(off%8)))
}
