// Package telemetry turns a running lab into time series: per connection,
// per path and per link direction, sampled on the lab's own clock every
// interval (10us of lab time by default). Samples go to sinks: JSON lines,
// CSV, the live Prometheus exporter (telemetry/prom), `mrlab top`; plots
// (PNG, SVG) are drawn from the samples afterwards.
//
// The sampler polls counters the transports and the fabric keep anyway; it
// adds nothing to the per-packet path.
package telemetry

import (
	"fmt"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/sim"
)

// Kind is what a sample describes.
type Kind uint8

// Sample kinds.
const (
	KindConn Kind = iota + 1 // one connection end (sender's view)
	KindPath                 // one path of a connection
	KindLink                 // one link direction
)

var kindNames = [...]string{KindConn: "conn", KindPath: "path", KindLink: "link"}

// String returns "conn", "path" or "link".
func (k Kind) String() string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// parseKind parses "conn", "path" or "link".
func parseKind(s string) (Kind, error) {
	for k, n := range kindNames {
		if n != "" && n == s {
			return Kind(k), nil
		}
	}
	return 0, fmt.Errorf("unknown telemetry kind %q (want conn, path or link)", s)
}

// MarshalText implements encoding.TextMarshaler.
func (k Kind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (k *Kind) UnmarshalText(b []byte) error {
	v, err := parseKind(string(b))
	*k = v
	return err
}

// Sample is one row of telemetry. Which fields are meaningful depends on
// Kind: identity fields say which connection, path or link it is; rates
// and fractions are over the interval since the previous sample of the
// same series; counters are cumulative since the series began.
//
// The JSON names are the JSON-lines and CSV column names.
type Sample struct {
	T    sim.Time `json:"t_ns"`
	Kind Kind     `json:"kind"`

	// Connection and path identity.
	Host      string `json:"host"`
	Peer      string `json:"peer"`
	Conn      uint32 `json:"conn"`
	Transport string `json:"transport"`
	Path      int    `json:"path"`
	Plane     int    `json:"plane"`
	// Entropy is the path's current UDP source port.
	Entropy uint16 `json:"entropy"`
	// State is the path's state (active, suspect, failed ...).
	State string `json:"state"`

	// Congestion and reliability state.
	Cwnd     int64    `json:"cwnd"`     // bytes
	InFlight int64    `json:"inflight"` // bytes
	SRTT     sim.Time `json:"srtt_ns"`
	RTO      sim.Time `json:"rto_ns"`
	// Rate is the delivery rate over the interval (bytes acknowledged),
	// bits/s.
	Rate float64 `json:"rate_bps"`
	// SendRate is the rate the sender put bytes on the wire over the
	// interval (retransmissions and headers included), bits/s.
	SendRate float64 `json:"send_bps"`
	// PacingRate is the rate the sender paces at, bits/s (0 if unpaced).
	PacingRate float64 `json:"pacing_bps"`
	// ECNFraction is the fraction of packets acknowledged in the interval
	// that were CE marked.
	ECNFraction float64 `json:"ecn_frac"`
	// RateHint is the receiver's fair-share grant, bits/s (0: none yet).
	RateHint float64 `json:"rate_hint_bps"`
	// Cumulative counters.
	BytesAcked     uint64 `json:"bytes_acked"`
	Retransmits    uint64 `json:"retx"`
	Timeouts       uint64 `json:"rto_count"`
	EntropyChanges uint64 `json:"entropy_changes"`

	// Link direction identity and state.
	Link       string `json:"link"`
	QueueBytes int64  `json:"queue_bytes"`
	TxBytes    uint64 `json:"tx_bytes"`
	TxPackets  uint64 `json:"tx_packets"`
	Drops      uint64 `json:"drops"`
	// DropsBy splits Drops by reason (fabric links; zero when the source
	// gives only the total). Not a file column: the Prometheus exporter
	// reads it for its reason label.
	DropsBy fabric.DropCounts `json:"-"`
	Marks   uint64            `json:"marks"`
	Util    float64           `json:"util"` // fraction of the link rate used in the interval
}

// Series identifies the series a sample belongs to: "path h3 conn 4 path 9".
func (s *Sample) Series() string {
	switch s.Kind {
	case KindConn:
		return fmt.Sprintf("conn %s conn %d", s.Host, s.Conn)
	case KindPath:
		return fmt.Sprintf("path %s conn %d path %d", s.Host, s.Conn, s.Path)
	case KindLink:
		return "link " + s.Link
	}
	return s.Kind.String()
}

// Sink receives samples. Samples of one instant arrive together, then
// EndBatch; sinks must not keep the pointer.
type Sink interface {
	Write(s *Sample) error
	// EndBatch marks the end of one sampling instant (the live exporter
	// publishes then, files may flush).
	EndBatch(now sim.Time) error
}
