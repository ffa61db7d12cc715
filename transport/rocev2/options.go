package rocev2

import (
	"fmt"

	"github.com/mrlab/mrlab/internal/sim"
)

// UDPPort is the IANA port of RoCEv2.
const UDPPort = 4791

// QPNOffset maps a NIC's connection ids (1, 2, ...) to queue pair numbers:
// QPN = LocalID + QPNOffset. QP0 and QP1 are reserved by InfiniBand (QP1
// carries connection management), and real devices number data QPs from
// about 16 up, so captures look familiar.
const QPNOffset = 16

// DCQCN holds the constants of DCQCN's reaction point (RP) and notification
// point (NP); docs/rocev2-baseline.md says where each default comes from
// and how the rules compare with the paper (Zhu et al., SIGCOMM 2015) and
// with ns-3's model of the NIC implementation (HPCC's RdmaHw).
type DCQCN struct {
	// G is the gain of the alpha EWMA.
	G float64
	// AlphaInterval is the alpha update period: alpha = (1-G)alpha + G if
	// a CNP came in the interval, (1-G)alpha if not.
	AlphaInterval sim.Time
	// DecreaseInterval is the rate-decrease period: the rate is cut at
	// most once per interval, however many CNPs come.
	DecreaseInterval sim.Time
	// IncreaseInterval is the rate-increase timer period.
	IncreaseInterval sim.Time
	// ByteCounter is the bytes sent between byte-counter increase events;
	// 0 turns the byte counter off (increases come from the timer only).
	ByteCounter int
	// FastRecovery is F: the number of increase events spent halving the
	// distance to the target rate before additive increase starts.
	FastRecovery int
	// AI and HAI are the additive and hyper-additive increase steps, in
	// bits per second.
	AI, HAI float64
	// MinRate is the floor of the current rate, in bits per second.
	MinRate float64
	// ClampTarget sets the target rate to the current rate at every cut
	// (the paper); without it the target is kept through consecutive cuts
	// with no increase between them (the NICs' and ns-3's default), so
	// the QP recovers towards its rate before the congestion episode.
	ClampTarget bool
	// CNPInterval is the notification point's minimum gap between two CNPs
	// for one QP.
	CNPInterval sim.Time
}

// DefaultDCQCN returns the DCQCN constants used unless Options override
// them (a fresh value: callers may change their copy).
func DefaultDCQCN() DCQCN {
	return DCQCN{
		G:                1.0 / 16,             // ns-3 RdmaHw EwmaGain
		AlphaInterval:    55 * sim.Microsecond, // paper K; ns-3 AlphaResumInterval
		DecreaseInterval: 4 * sim.Microsecond,  // ns-3 RateDecreaseInterval (NIC rate_reduce_monitor_period)
		IncreaseInterval: 55 * sim.Microsecond, // paper T
		ByteCounter:      0,                    // ns-3's RdmaHw has none (the paper: 10 MB)
		FastRecovery:     5,                    // paper F; ns-3 FastRecoveryTimes
		AI:               50e6,                 // HPCC's ns-3 config RATE_AI
		HAI:              100e6,                // HPCC's ns-3 config RATE_HAI
		MinRate:          100e6,                // ns-3 MinRate
		CNPInterval:      50 * sim.Microsecond, // paper N
	}
}

// Options configure every queue pair of one Protocol (one NIC). The zero
// value selects the defaults documented on each field.
type Options struct {
	// Timeout is the IB local ACK timeout exponent: the requester waits
	// 4.096us * 2^Timeout for an ACK before going back N. 0 means 14
	// (about 67 ms, a common HCA default); 8 gives about 1 ms. Values above
	// 31 are an error.
	Timeout int
	// AckTimeout, if non-zero, sets the local ACK timeout as a duration and
	// overrides Timeout.
	AckTimeout sim.Time
	// RetryCount is retry_cnt: how many times a request is retransmitted
	// after a timeout or a sequence-error NAK without progress before the
	// QP fails with StatusRetryExceeded. 0 means 7; use NoRetry for none.
	RetryCount int
	// RNRRetry is rnr_retry: how many RNR NAKs in a row the requester
	// accepts before failing with StatusRNRRetryExceeded. 0 means 7, which
	// as in IB means "retry forever"; use NoRetry for none.
	RNRRetry int
	// MinRNRTimer is the RNR timer code (IBTA table 45) this end's
	// responder puts in its RNR NAKs. 0 means 12 (0.64 ms), the rdma-core
	// default.
	MinRNRTimer uint8
	// Window caps the requester's unacknowledged packets. 0 means the
	// bandwidth-delay product of the line rate over WindowRTT, and at
	// least 64.
	Window int
	// WindowRTT is the round-trip time the default window covers; 0 means
	// 200us (several switch hops with queueing).
	WindowRTT sim.Time
	// AckEvery is the ACK coalescing interval: the requester sets AckReq
	// on the last packet of each message and on every AckEvery-th packet,
	// and the responder acknowledges on AckReq or after AckEvery in-order
	// packets. 0 means 16.
	AckEvery int
	// SendQueue and RecvQueue bound the posted work requests. 0 means 4096
	// each. Queues grow on demand up to these bounds.
	SendQueue, RecvQueue int
	// MaxReads bounds the RDMA READs a requester has outstanding and the
	// responder resources this end offers (the smaller of the two ends'
	// values wins). 0 means 16.
	MaxReads int
	// PinPort makes every QP use NIC port Port; otherwise an active QP
	// picks a port from its random stream (QPN mod Config.Ports without
	// one) and a passive QP uses the port its REQ arrived on.
	PinPort bool
	Port    int
	// NoDCQCN turns rate control off: the QP sends at line rate whatever
	// CNPs say. Notification (sending CNPs on CE) stays on.
	NoDCQCN bool
	// DCQCN overrides DefaultDCQCN when its G is non-zero.
	DCQCN DCQCN
	// CMTimeout is the connection-management retry interval; 0 means the
	// local ACK timeout. CMRetries bounds the retries (0 means 15, the
	// Linux CM's max_cm_retries).
	CMTimeout sim.Time
	CMRetries int

	// Loss recovery of current NICs (docs/rocev2-baseline.md says which
	// NIC generation each models). All off is a ConnectX-4/5-era QP:
	// go-back-N and a fixed local ACK timer.

	// SelectiveRepeat (NVIDIA selective_repeat_forced_en; IRN): the
	// responder keeps WRITE and SEND packets that arrive past a gap, up to
	// SRWindow PSNs ahead of the expected one, and NAKs the expected PSN
	// (a sequence-error NAK) per hole, repeated every AckEvery packets
	// past it; the requester resends only the NAKed PSN (once per round
	// trip), and on a timeout only the oldest unacknowledged one. Both
	// ends must have it on (the lab's option applies to every NIC). READs
	// keep go-back-N. Kept packets are copies: a NIC in synthetic payload
	// mode cannot follow their content (use real bytes).
	SelectiveRepeat bool
	// SRWindow is how many PSNs past the expected one the responder keeps;
	// 0 means the requester's window (Window's default).
	SRWindow int
	// AdaptiveRetrans (roce_adp_retrans_en): the local ACK timer starts
	// from the QP's measured round trip, srtt + 4 rttvar (RFC 6298), at
	// least AdaptiveMinTimeout, doubles on every timeout without progress
	// and returns to the measured value on progress; the configured ACK
	// timeout is its ceiling, and the QP fails after RetryCount x the ACK
	// timeout without progress, as NVIDIA's profile does.
	AdaptiveRetrans bool
	// AdaptiveMinTimeout is the adaptive timer's floor; 0 means 4 us, the
	// firmware's minimum base timeout (adp_retx_base_timeout_min).
	AdaptiveMinTimeout sim.Time
	// SlowRestart (roce_slow_restart_en): after a local ACK timeout the QP
	// may have one packet outstanding, and one more for every packet
	// acknowledged (doubling per round trip), back up to its window.
	SlowRestart bool
	// TxWindow (roce_tx_window_en; IRN's BDP cap): the requester's window
	// is the bandwidth-delay product of the line rate over the smallest
	// round trip measured (at least AckEvery packets), not Window.
	TxWindow bool
}

// NoRetry asks for zero retries in RetryCount or RNRRetry.
const NoRetry = -1

// ackTimeoutUnit is IB's local ACK timeout unit, 4.096 us.
const ackTimeoutUnit = 4096 * sim.Nanosecond

// resolved returns o with defaults filled in, or an error naming the bad
// field.
func (o Options) resolved() (Options, error) {
	if o.Timeout < 0 || o.Timeout > 31 {
		return o, fmt.Errorf("rocev2 options: Timeout %d out of range 0..31", o.Timeout)
	}
	if o.Timeout == 0 {
		o.Timeout = 14
	}
	if o.AckTimeout < 0 {
		return o, fmt.Errorf("rocev2 options: AckTimeout %v is negative", o.AckTimeout)
	}
	if o.AckTimeout == 0 {
		o.AckTimeout = ackTimeoutUnit << o.Timeout
	}
	var err error
	if o.RetryCount, err = retries("RetryCount", o.RetryCount); err != nil {
		return o, err
	}
	if o.RNRRetry, err = retries("RNRRetry", o.RNRRetry); err != nil {
		return o, err
	}
	if o.MinRNRTimer > 31 {
		return o, fmt.Errorf("rocev2 options: MinRNRTimer %d out of range 0..31", o.MinRNRTimer)
	}
	if o.MinRNRTimer == 0 {
		o.MinRNRTimer = 12
	}
	if o.Window < 0 || o.Window >= 1<<22 {
		return o, fmt.Errorf("rocev2 options: Window %d out of range 0..2^22", o.Window)
	}
	if o.WindowRTT < 0 {
		return o, fmt.Errorf("rocev2 options: WindowRTT %v is negative", o.WindowRTT)
	}
	if o.WindowRTT == 0 {
		o.WindowRTT = 200 * sim.Microsecond
	}
	if o.AckEvery < 0 {
		return o, fmt.Errorf("rocev2 options: AckEvery %d is negative", o.AckEvery)
	}
	if o.AckEvery == 0 {
		o.AckEvery = 16
	}
	if o.SendQueue < 0 || o.RecvQueue < 0 {
		return o, fmt.Errorf("rocev2 options: negative queue size (SendQueue %d, RecvQueue %d)", o.SendQueue, o.RecvQueue)
	}
	if o.SendQueue == 0 {
		o.SendQueue = 4096
	}
	if o.RecvQueue == 0 {
		o.RecvQueue = 4096
	}
	if o.MaxReads < 0 || o.MaxReads > 255 {
		return o, fmt.Errorf("rocev2 options: MaxReads %d out of range 0..255", o.MaxReads)
	}
	if o.MaxReads == 0 {
		o.MaxReads = 16
	}
	if o.PinPort && o.Port < 0 {
		return o, fmt.Errorf("rocev2 options: Port %d is negative", o.Port)
	}
	if o.DCQCN.G == 0 {
		o.DCQCN = DefaultDCQCN()
	}
	if err := o.DCQCN.check(); err != nil {
		return o, err
	}
	if o.CMTimeout < 0 {
		return o, fmt.Errorf("rocev2 options: CMTimeout %v is negative", o.CMTimeout)
	}
	if o.CMTimeout == 0 {
		o.CMTimeout = o.AckTimeout
	}
	if o.CMRetries < 0 {
		return o, fmt.Errorf("rocev2 options: CMRetries %d is negative", o.CMRetries)
	}
	if o.CMRetries == 0 {
		o.CMRetries = 15
	}
	if o.SRWindow < 0 || o.SRWindow >= 1<<22 {
		return o, fmt.Errorf("rocev2 options: SRWindow %d out of range 0..2^22", o.SRWindow)
	}
	if o.AdaptiveMinTimeout < 0 {
		return o, fmt.Errorf("rocev2 options: AdaptiveMinTimeout %v is negative", o.AdaptiveMinTimeout)
	}
	if o.AdaptiveMinTimeout == 0 {
		o.AdaptiveMinTimeout = 4 * sim.Microsecond
	}
	return o, nil
}

// check returns an error naming the first DCQCN constant out of range.
func (d *DCQCN) check() error {
	for _, f := range []struct {
		name string
		bad  bool
	}{
		{"G", d.G < 0 || d.G > 1},
		{"AlphaInterval", d.AlphaInterval <= 0},
		{"DecreaseInterval", d.DecreaseInterval < 0},
		{"IncreaseInterval", d.IncreaseInterval <= 0},
		{"ByteCounter", d.ByteCounter < 0},
		{"FastRecovery", d.FastRecovery < 0},
		{"AI", d.AI < 0},
		{"HAI", d.HAI < 0},
		{"MinRate", d.MinRate <= 0},
		{"CNPInterval", d.CNPInterval < 0},
	} {
		if f.bad {
			return fmt.Errorf("rocev2 options: DCQCN.%s out of range (DCQCN %+v)", f.name, *d)
		}
	}
	return nil
}

func retries(name string, v int) (int, error) {
	switch {
	case v == NoRetry:
		return 0, nil
	case v == 0:
		return 7, nil
	case v < 0 || v > 7:
		return 0, fmt.Errorf("rocev2 options: %s %d out of range 1..7 (or NoRetry)", name, v)
	}
	return v, nil
}

// Validate reports whether NewProtocol would accept o, with an error
// naming the bad field.
func (o Options) Validate() error {
	_, err := o.resolved()
	return err
}
