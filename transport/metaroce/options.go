package metaroce

import (
	"fmt"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport/metaroce/wire"
)

// Options tunes a Protocol and every connection it opens. The zero value of
// a field means its default; defaults are listed with each field.
type Options struct {
	// Paths is the number of paths each connection sprays over (1..256;
	// default 16). Path p uses NIC port (plane) p mod Config.Ports.
	Paths int
	// AckEvery: the receiver ACKs a path after this many data packets
	// (default 2). Holes, CE marks, ACK requests, probes and hole fills
	// are ACKed at once regardless.
	AckEvery int
	// DelayedAck bounds how long a received packet waits for its ACK
	// (default 4us).
	DelayedAck sim.Time
	// RTOMin is the floor of the retransmission timeout; the effective
	// floor is max(RTOMin, 2 x the path's minimum RTT) (default 30us).
	RTOMin sim.Time
	// RTOMax caps the timeout and its exponential back-off (default 5ms).
	RTOMax sim.Time
	// InitialRTO is a path's timeout before it has an RTT sample
	// (default 100us).
	InitialRTO sim.Time
	// BaseRTT is the round-trip time assumed before one is measured: it
	// sizes the initial window and the tail-loss probe (default 10us).
	BaseRTT sim.Time
	// LossesBeforeRepath: this many losses among a path's last LossWindow
	// packets move the path to a new entropy (default 3).
	LossesBeforeRepath int
	// LossWindow is the packet window LossesBeforeRepath counts over
	// (default 64).
	LossWindow int
	// TimeoutsBeforeFail: this many consecutive timeouts mark a path
	// failed; it then only carries probes until one is answered
	// (default 3). Under heavy random loss on the paths that deliver it
	// takes more, up to 4x, so that lost probes alone rarely fail a path.
	TimeoutsBeforeFail int
	// FailedProbeInterval is how often a failed path is re-probed, each
	// time with a new entropy (default 500us).
	FailedProbeInterval sim.Time
	// AllFailedTimeout: a connection whose paths have all been failed this
	// long gives up with StatusRetryExceeded (default 50ms).
	AllFailedTimeout sim.Time
	// ECNGain is DCTCP's g, the weight of one round's marked fraction in
	// alpha (default 1/16).
	ECNGain float64
	// RepathMarkFraction and RepathMarkRounds: a path whose marked fraction
	// stays above the fraction for that many consecutive rounds, while most
	// other paths are below it, moves to a new entropy (defaults 0.5, 5).
	RepathMarkFraction float64
	RepathMarkRounds   int
	// DisableRateHint turns the receiver-driven fair-share hint off: the
	// receiver sends "no hint" and senders ignore hints (for experiments
	// comparing with and without it).
	DisableRateHint bool
	// HintUtilization is the fraction of its line rate a receiver hands out
	// to its senders (default 0.95).
	HintUtilization float64
	// ActiveWindow: a sender counts as active at a receiver for this long
	// after its last data packet (default 40us).
	ActiveWindow sim.Time
	// InitialWindow is a new connection's in-flight limit in bytes, split
	// over its paths (default one BDP: Ports x LineRate x BaseRTT).
	InitialWindow int
	// MaxRetries: a chunk transmitted this many times without being
	// acknowledged fails the connection with StatusRetryExceeded
	// (default 16).
	MaxRetries int
	// RNRRetries is how often a SEND refused for want of a posted receive
	// is retried before it fails with StatusRNRRetryExceeded; negative
	// means forever (default 7).
	RNRRetries int
	// RNRDelay is the first RNR back-off; it doubles with every retry
	// (default 20us).
	RNRDelay sim.Time
	// SetupTimeout is the first SYN (and CLOSE) retry interval; it doubles
	// with every retry, up to MaxRetries attempts (default 100us).
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
	def(&o.Paths, 16)
	def(&o.AckEvery, 2)
	deft(&o.DelayedAck, 4*sim.Microsecond)
	deft(&o.RTOMin, 30*sim.Microsecond)
	deft(&o.RTOMax, 5*sim.Millisecond)
	deft(&o.InitialRTO, 100*sim.Microsecond)
	deft(&o.BaseRTT, 10*sim.Microsecond)
	def(&o.LossesBeforeRepath, 3)
	def(&o.LossWindow, 64)
	def(&o.TimeoutsBeforeFail, 3)
	deft(&o.FailedProbeInterval, 500*sim.Microsecond)
	deft(&o.AllFailedTimeout, 50*sim.Millisecond)
	if o.ECNGain == 0 {
		o.ECNGain = 1.0 / 16
	}
	if o.RepathMarkFraction == 0 {
		o.RepathMarkFraction = 0.5
	}
	def(&o.RepathMarkRounds, 5)
	if o.HintUtilization == 0 {
		o.HintUtilization = 0.95
	}
	deft(&o.ActiveWindow, 40*sim.Microsecond)
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
	case o.Paths < 1 || o.Paths > 256:
		return o, fmt.Errorf("metaroce options: Paths %d not in 1..256", o.Paths)
	case o.SendQueue < 1 || o.SendQueue > 65535:
		return o, fmt.Errorf("metaroce options: SendQueue %d not in 1..65535", o.SendQueue)
	case o.RecvQueue < 1 || o.DSNWindow < 1 || o.AckEvery < 1 || o.MaxRetries < 1:
		return o, fmt.Errorf("metaroce options: RecvQueue, DSNWindow, AckEvery and MaxRetries must be positive")
	case o.ECNGain < 0 || o.ECNGain > 1 || o.HintUtilization < 0 || o.HintUtilization > 1:
		return o, fmt.Errorf("metaroce options: ECNGain and HintUtilization must be in 0..1")
	case o.RTOMin > o.RTOMax:
		return o, fmt.Errorf("metaroce options: RTOMin %v above RTOMax %v", o.RTOMin, o.RTOMax)
	}
	return o, nil
}

// Validate reports whether NewProtocol would accept o (lab files check
// their transports section with it).
func (o Options) Validate() error {
	_, err := o.withDefaults()
	return err
}
