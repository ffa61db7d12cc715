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
	{name: "send_bps", kinds: kFlow, typ: colFloat, f: func(s *Sample) float64 { return s.SendRate }},
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

// Metric is one numeric series of a kind, for exporters: its column name,
// whether it only grows, a help text and how to read it from a sample.
type Metric struct {
	Name    string
	Counter bool
	Help    string
	Value   func(*Sample) float64
}

var counterColumns = map[string]bool{"bytes_acked": true, "retx": true, "rto_count": true,
	"entropy_changes": true, "tx_bytes": true, "tx_packets": true, "drops": true, "marks": true}

var metricHelp = map[string]string{
	"cwnd":            "Congestion window in bytes.",
	"inflight":        "Bytes sent and not yet acknowledged.",
	"srtt_ns":         "Smoothed round-trip time.",
	"rto_ns":          "Retransmission timeout.",
	"rate_bps":        "Delivery rate over the last interval, bit/s (connections: bytes of this end's requests acknowledged plus bytes it placed as a receiver).",
	"pacing_bps":      "Rate the sender paces at, bit/s.",
	"send_bps":        "Rate the sender transmitted at over the last interval (retransmissions included), bit/s.",
	"ecn_frac":        "Fraction of packets acknowledged in the last interval that were CE marked.",
	"rate_hint_bps":   "Receiver's fair-share rate grant, bit/s.",
	"bytes_acked":     "Bytes acknowledged (connections: this end's requests' bytes acknowledged plus bytes it placed as a receiver).",
	"retx":            "Packets retransmitted.",
	"rto_count":       "Retransmission timeouts.",
	"entropy_changes": "Entropy (UDP source port) changes: re-pathing decisions.",
	"entropy":         "Current UDP source port of the path.",
	"plane":           "Plane of the path.",
	"queue_bytes":     "Bytes waiting in the link direction's queue.",
	"tx_bytes":        "Bytes that started serialization.",
	"tx_packets":      "Packets that started serialization.",
	"drops":           "Packets dropped on the link direction, all reasons.",
	"marks":           "Packets CE marked on the link direction.",
	"util":            "Fraction of the link rate used over the last interval.",
}

// Metrics lists the numeric series of a kind (identity columns such as
// conn and path are labels, not metrics).
func Metrics(k Kind) []Metric {
	var out []Metric
	for i := range columns {
		c := &columns[i]
		if c.typ == colString || !c.kinds.has(k) {
			continue
		}
		switch c.name {
		case "t_ns", "conn", "path", "plane":
			continue
		}
		out = append(out, Metric{Name: c.name, Counter: counterColumns[c.name], Help: metricHelp[c.name],
			Value: func(s *Sample) float64 { return numeric(c, s) }})
	}
	return out
}
