package metaroce

import (
	"fmt"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport/metaroce/wire"
)

// Options tunes a Protocol and every connection it opens. The zero value of
// a field means its default; defaults are listed with each field. No
// default encodes a link rate or a topology: the times the engine runs on
// come from RTTs it measures and from the NIC's line rate (see doc.go).
type Options struct {
	// Paths is the number of paths each connection sprays over (1..256;
	// default: 8 per NIC port, at least 16, see DefaultPaths; fewer take
	// new data while the window is small, see doc.go). Path p uses
	// NIC port (plane) p mod Config.Ports.
	Paths int
	// AckEvery: the receiver sends an ACK once this many data packets of
	// the connection (on any paths) have arrived since its last ACK
	// (default 4). Holes, hole fills, duplicates, probes, a message
	// completely placed and a moved rate hint are ACKed at once.
	AckEvery int
	// AckDelay bounds how long a received data packet waits for its ACK
	// (default: the time AckEvery full-size packets take to arrive at one
	// port's line rate). It is announced to the peer in the handshake,
	// and the peer's timers allow for it.
	AckDelay sim.Time
	// RTOMax caps the retransmission timeout's back-off and a probing
	// path's probe interval (default 5ms).
	RTOMax sim.Time
	// TimeoutsBeforeFail: a path that times out this many times in a row
	// is failed: it carries only probes, at the longest interval, until
	// one is answered (default 3). It is raised when the connection's
	// measured loss makes so many lost probes in a row likely by chance
	// (see doc.go, "chance" rule).
	TimeoutsBeforeFail int
	// AllFailedTimeout: a connection whose paths have all been failed this
	// long gives up with StatusRetryExceeded (default 50ms).
	AllFailedTimeout sim.Time
	// ECNGain is DCTCP's g, the weight of one round's marked fraction in
	// the connection's alpha and of one packet's mark in a path's
	// (default 1/16).
	ECNGain float64
	// RepathMarkFraction and RepathMarkRounds: a path whose marked fraction
	// stays above the fraction for that many consecutive rounds, while
	// fewer than half of the active paths do, drains and moves to a new
	// entropy (defaults 0.5, 5).
	RepathMarkFraction float64
	RepathMarkRounds   int
	// RepathConfidence is the significance of the loss test that moves a
	// path off a lossy route: a path whose losses would happen by chance
	// at the typical path's loss rate with probability below this moves
	// (default 1e-3).
	RepathConfidence float64
	// DisableRateHint turns the receiver-driven fair-share hint off: the
	// receiver sends "no hint" and senders ignore hints (for experiments
	// comparing with and without it).
	DisableRateHint bool
	// HoldFirstGrant (off by default; both ends must run it): a receiver
	// holds the first share its SYN_ACK granted against its capacity
	// until the dialer's first data packet arrives, however late, instead
	// of only while it presumes the new connection active (until four
	// RTTs after the handshake); a dialer keeps its first flight whenever
	// its first data goes, instead of only within two handshake RTTs of
	// the SYN_ACK. A connection set up before its first message (as
	// collectives' are) then skips a round trip at one packet; an incast
	// whose senders start late gets the first dialer's stale grant on top
	// of the others' shares (within the one BDP the grants add up to).
	// See docs/metaroce-wire.md §9, first flight.
	HoldFirstGrant bool
	// ReviseFirstGrant (off by default; the acceptor's rule, which any
	// dialer understands): an acceptor that finds less capacity left than
	// a new dialer's share lowers the outstanding first grants above that
	// share to it and tells their dialers (a SYN_ACK with REVISE), so
	// that N dialers end with C/N each instead of the first with all of
	// it and the rest one packet; a connection's first pacing interval is
	// stretched by a fraction of itself (from its nonce) so that senders
	// given the same share at once do not keep the same phase, and a
	// dialer's first ACK releases its pacer. An all-to-all's first
	// operation no longer loses a round trip (small bed, 400G: 0.89x ->
	// 1.06x lossless RoCEv2; 64 hosts 0.69x -> 1.04x). Off until the
	// whole suite has run with it (64 hosts at 25G: 0.815x -> 0.790x).
	// See docs/metaroce-wire.md §9, first flight.
	ReviseFirstGrant bool
	// HintUtilization is the fraction of its line rate a receiver hands out
	// to its senders (default 1).
	HintUtilization float64
	// MaxRetries: a chunk declared lost this many times by SACK (on paths
	// that deliver later packets) fails the connection with
	// StatusRetryExceeded (default 16). It is raised when the measured
	// loss rate makes so many losses of one packet in a row likely by
	// chance. A peer that answers nothing at all is caught by
	// AllFailedTimeout.
	MaxRetries int
	// RNRRetries is how often a SEND refused for want of a posted receive
	// is retried before it fails with StatusRNRRetryExceeded; negative
	// means forever (default 7).
	RNRRetries int
	// RNRDelay is the first RNR back-off; it doubles with every retry
	// (default 20us).
	RNRDelay sim.Time
	// SetupTimeout is the first SYN (and CLOSE) retry interval, before
	// anything about the path is known; it doubles with every retry, up
	// to MaxRetries attempts (default 100us).
	SetupTimeout sim.Time
	// SendQueue is the most messages a connection holds posted and not
	// yet completed; it is also the message window it advertises (1..65535;
	// default 1024).
	SendQueue int
	// RecvQueue is the most receives a connection holds posted
	// (default 1024).
	RecvQueue int
	// DSNWindow is the most chunks in flight per connection direction
	// (default 16384).
	DSNWindow int
	// UDPPort is the destination port (default wire.UDPPort, 4796).
	UDPPort uint16
	// Faults plants faults for the conformance suite's self-check
	// (mutation.go: a Mutation set); always nil outside its tests.
	Faults Faults
}

// withDefaults fills in defaults and checks ranges.
func (o Options) withDefaults() (Options, error) {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	deft := func(v *sim.Time, d sim.Time) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.AckEvery, 4)
	deft(&o.RTOMax, 5*sim.Millisecond)
	def(&o.TimeoutsBeforeFail, 3)
	deft(&o.AllFailedTimeout, 50*sim.Millisecond)
	if o.ECNGain == 0 {
		o.ECNGain = 1.0 / 16
	}
	if o.RepathMarkFraction == 0 {
		o.RepathMarkFraction = 0.5
	}
	def(&o.RepathMarkRounds, 5)
	if o.RepathConfidence == 0 {
		o.RepathConfidence = 1e-3
	}
	if o.HintUtilization == 0 {
		o.HintUtilization = 1
	}
	def(&o.MaxRetries, 16)
	def(&o.RNRRetries, 7)
	deft(&o.RNRDelay, 20*sim.Microsecond)
	deft(&o.SetupTimeout, 100*sim.Microsecond)
	def(&o.SendQueue, 1024)
	def(&o.RecvQueue, 1024)
	def(&o.DSNWindow, 16384)
	if o.UDPPort == 0 {
		o.UDPPort = wire.UDPPort
	}
	switch {
	case o.Paths < 0 || o.Paths > 256:
		return o, fmt.Errorf("metaroce options: Paths %d not in 1..256", o.Paths)
	case o.SendQueue < 1 || o.SendQueue > 65535:
		return o, fmt.Errorf("metaroce options: SendQueue %d not in 1..65535", o.SendQueue)
	case o.RecvQueue < 1 || o.DSNWindow < 1 || o.AckEvery < 1 || o.MaxRetries < 1 || o.TimeoutsBeforeFail < 1:
		return o, fmt.Errorf("metaroce options: RecvQueue, DSNWindow, AckEvery, MaxRetries and TimeoutsBeforeFail must be positive")
	case o.ECNGain < 0 || o.ECNGain > 1 || o.HintUtilization < 0 || o.HintUtilization > 1:
		return o, fmt.Errorf("metaroce options: ECNGain and HintUtilization must be in 0..1")
	case o.RepathConfidence <= 0 || o.RepathConfidence >= 1:
		return o, fmt.Errorf("metaroce options: RepathConfidence %g not in (0, 1)", o.RepathConfidence)
	case o.AckDelay < 0 || o.RTOMax <= 0:
		return o, fmt.Errorf("metaroce options: negative AckDelay or RTOMax")
	}
	return o, nil
}

// DefaultPaths is how many paths a connection over ports NIC ports
// (planes) sprays over when Options.Paths is 0: 8 per plane, at least 16,
// at most 256. Not all of them take new data at once: a connection whose
// window (or what it has to send) is a few packets uses a few paths per
// plane, AckEvery packets each (activePerPlane, path.go), so many paths
// cost a small connection nothing, and a large one samples each plane's
// ECMP fabric by 8 routes (an 8-plane k=4 fat-tree permutation: 0.754 of
// capacity with 4 per plane, 0.845 with 8).
func DefaultPaths(ports int) int {
	return min(max(16, 8*ports), 256)
}

// Validate reports whether NewProtocol would accept o (lab files check
// their transports section with it).
func (o Options) Validate() error {
	_, err := o.withDefaults()
	return err
}
