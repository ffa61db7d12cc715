package telemetry

import (
	"math"
	"strconv"
)

// kinds is a set of sample kinds, for which columns a kind has.
type kinds uint8

const (
	kConn kinds = 1 << KindConn
	kPath kinds = 1 << KindPath
	kLink kinds = 1 << KindLink
	kFlow       = kConn | kPath
	kAll        = kConn | kPath | kLink
)

func (ks kinds) has(k Kind) bool { return ks&(1<<k) != 0 }

type colType uint8

const (
	colInt colType = iota
	colUint
	colFloat
	colString
)

// column is one field of a sample as the writers spell it. The names match
// Sample's JSON tags, so encoding/json reads what the writers write.
type column struct {
	name  string
	kinds kinds
	typ   colType
	i     func(*Sample) int64
	u     func(*Sample) uint64
	f     func(*Sample) float64
	s     func(*Sample) string
}

// columns in output order. Identity first, then state, then counters.
var columns = []column{
	{name: "t_ns", kinds: kAll, typ: colInt, i: func(s *Sample) int64 { return int64(s.T) }},
	{name: "kind", kinds: kAll, typ: colString, s: func(s *Sample) string { return s.Kind.String() }},
	{name: "host", kinds: kFlow, typ: colString, s: func(s *Sample) string { return s.Host }},
	{name: "peer", kinds: kFlow, typ: colString, s: func(s *Sample) string { return s.Peer }},
	{name: "conn", kinds: kFlow, typ: colUint, u: func(s *Sample) uint64 { return uint64(s.Conn) }},
	{name: "transport", kinds: kConn, typ: colString, s: func(s *Sample) string { return s.Transport }},
	{name: "path", kinds: kPath, typ: colInt, i: func(s *Sample) int64 { return int64(s.Path) }},
	{name: "plane", kinds: kPath, typ: colInt, i: func(s *Sample) int64 { return int64(s.Plane) }},
	{name: "entropy", kinds: kPath, typ: colUint, u: func(s *Sample) uint64 { return uint64(s.Entropy) }},
	{name: "state", kinds: kPath, typ: colString, s: func(s *Sample) string { return s.State }},
	{name: "link", kinds: kLink, typ: colString, s: func(s *Sample) string { return s.Link }},
	{name: "cwnd", kinds: kFlow, typ: colInt, i: func(s *Sample) int64 { return s.Cwnd }},
	{name: "inflight", kinds: kFlow, typ: colInt, i: func(s *Sample) int64 { return s.InFlight }},
	{name: "srtt_ns", kinds: kFlow, typ: colInt, i: func(s *Sample) int64 { return int64(s.SRTT) }},
	{name: "rto_ns", kinds: kFlow, typ: colInt, i: func(s *Sample) int64 { return int64(s.RTO) }},
	{name: "rate_bps", kinds: kFlow, typ: colFloat, f: func(s *Sample) float64 { return s.Rate }},
	{name: "pacing_bps", kinds: kConn, typ: colFloat, f: func(s *Sample) float64 { return s.PacingRate }},
	{name: "ecn_frac", kinds: kFlow, typ: colFloat, f: func(s *Sample) float64 { return s.ECNFraction }},
	{name: "rate_hint_bps", kinds: kConn, typ: colFloat, f: func(s *Sample) float64 { return s.RateHint }},
	{name: "bytes_acked", kinds: kFlow, typ: colUint, u: func(s *Sample) uint64 { return s.BytesAcked }},
	{name: "retx", kinds: kFlow, typ: colUint, u: func(s *Sample) uint64 { return s.Retransmits }},
	{name: "rto_count", kinds: kFlow, typ: colUint, u: func(s *Sample) uint64 { return s.Timeouts }},
	{name: "entropy_changes", kinds: kFlow, typ: colUint, u: func(s *Sample) uint64 { return s.EntropyChanges }},
	{name: "queue_bytes", kinds: kLink, typ: colInt, i: func(s *Sample) int64 { return s.QueueBytes }},
	{name: "tx_bytes", kinds: kLink, typ: colUint, u: func(s *Sample) uint64 { return s.TxBytes }},
	{name: "tx_packets", kinds: kLink, typ: colUint, u: func(s *Sample) uint64 { return s.TxPackets }},
	{name: "drops", kinds: kLink, typ: colUint, u: func(s *Sample) uint64 { return s.Drops }},
	{name: "marks", kinds: kLink, typ: colUint, u: func(s *Sample) uint64 { return s.Marks }},
	{name: "util", kinds: kLink, typ: colFloat, f: func(s *Sample) float64 { return s.Util }},
}

// appendNumber appends a numeric column's value.
func (c *column) appendNumber(b []byte, s *Sample) []byte {
	switch c.typ {
	case colInt:
		return strconv.AppendInt(b, c.i(s), 10)
	case colUint:
		return strconv.AppendUint(b, c.u(s), 10)
	case colFloat:
		v := c.f(s)
		if math.IsNaN(v) || math.IsInf(v, 0) {
			// JSON has no NaN; a rate over an empty interval is 0.
			v = 0
		}
		return strconv.AppendFloat(b, v, 'g', -1, 64)
	}
	return b
}
