package labs

import (
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/metaroce"
	"github.com/mrlab/mrlab/transport/rocev2"
)

// Transports is a lab's transports section: the options every NIC's
// MetaRoCE and RoCEv2 run with, and how many RoCEv2 queue pairs a workload
// opens between two hosts. The zero value is every transport's defaults.
type Transports struct {
	MetaRoCE metaroce.Options
	RoCEv2   rocev2.Options
	// RoCEv2QPs is the RoCEv2 queue pairs per host pair (qps_per_peer): 0
	// means one, PerPlane one on each plane.
	RoCEv2QPs int
}

// PerPlane in Transports.RoCEv2QPs asks for one queue pair per plane.
const PerPlane = -1

// ConnsPerPeer returns how many connections of kind a workload opens
// between two hosts with planes planes, unless told otherwise: RoCEv2's
// qps_per_peer, one for MetaRoCE (a connection already spans every
// plane).
func (t Transports) ConnsPerPeer(kind transport.Kind, planes int) int {
	if kind != transport.RoCEv2 {
		return 1
	}
	switch {
	case t.RoCEv2QPs == PerPlane:
		return max(planes, 1)
	case t.RoCEv2QPs > 0:
		return t.RoCEv2QPs
	}
	return 1
}

// optionKey is one key of a transport's section: its name and how it
// decodes into the lab's Transports. Keys are tables (metaroceKeys,
// rocev2Keys, dcqcnKeys): an option is one line to add.
type optionKey[T any] struct {
	name   string
	decode func(d *decoder, v *yaml.Node, path string, t *T)
}

// The key kinds. Each takes the option's field; values outside the range
// are errors at the value's line.

func intKey[T any](name string, lo, hi int, field func(*T) *int) optionKey[T] {
	return optionKey[T]{name, func(d *decoder, v *yaml.Node, p string, t *T) { d.int(v, p, lo, hi, field(t)) }}
}

func durationKey[T any](name string, field func(*T) *sim.Time) optionKey[T] {
	return optionKey[T]{name, func(d *decoder, v *yaml.Node, p string, t *T) {
		var x sim.Time
		if d.duration(v, p, &x) {
			if x <= 0 {
				d.errorf(v, p, "must be above 0")
				return
			}
			*field(t) = x
		}
	}}
}

// fractionKey takes a fraction above 0 and at most 1 (0.95 or 95%).
func fractionKey[T any](name string, field func(*T) *float64) optionKey[T] {
	return optionKey[T]{name, func(d *decoder, v *yaml.Node, p string, t *T) {
		var x float64
		if d.fraction(v, p, &x) {
			if x == 0 {
				d.errorf(v, p, "must be above 0")
				return
			}
			*field(t) = x
		}
	}}
}

func rateKey[T any](name string, field func(*T) *float64) optionKey[T] {
	return optionKey[T]{name, func(d *decoder, v *yaml.Node, p string, t *T) { d.rate(v, p, field(t)) }}
}

// onOffKey sets *field to the value (on/off, true/false, yes/no); with
// invert, to its negation (for Disable... fields).
func onOffKey[T any](name string, invert bool, field func(*T) *bool) optionKey[T] {
	return optionKey[T]{name, func(d *decoder, v *yaml.Node, p string, t *T) {
		var b bool
		if d.onOff(v, p, &b) {
			*field(t) = b != invert
		}
	}}
}

// metaroceKeys are transports.metaroce's keys, one per metaroce.Options
// field a researcher would vary.
var metaroceKeys = []optionKey[Transports]{
	intKey("paths", 1, 256, func(t *Transports) *int { return &t.MetaRoCE.Paths }),
	intKey("ack_every", 1, 1024, func(t *Transports) *int { return &t.MetaRoCE.AckEvery }),
	durationKey("ack_delay", func(t *Transports) *sim.Time { return &t.MetaRoCE.AckDelay }),
	durationKey("rto_max", func(t *Transports) *sim.Time { return &t.MetaRoCE.RTOMax }),
	intKey("timeouts_before_fail", 1, 1<<10, func(t *Transports) *int { return &t.MetaRoCE.TimeoutsBeforeFail }),
	durationKey("all_failed_timeout", func(t *Transports) *sim.Time { return &t.MetaRoCE.AllFailedTimeout }),
	fractionKey("ecn_gain", func(t *Transports) *float64 { return &t.MetaRoCE.ECNGain }),
	fractionKey("repath_mark_fraction", func(t *Transports) *float64 { return &t.MetaRoCE.RepathMarkFraction }),
	intKey("repath_mark_rounds", 1, 1<<10, func(t *Transports) *int { return &t.MetaRoCE.RepathMarkRounds }),
	fractionKey("repath_confidence", func(t *Transports) *float64 { return &t.MetaRoCE.RepathConfidence }),
	onOffKey("rate_hint", true, func(t *Transports) *bool { return &t.MetaRoCE.DisableRateHint }),
	onOffKey("hold_first_grant", false, func(t *Transports) *bool { return &t.MetaRoCE.HoldFirstGrant }),
	onOffKey("revise_first_grant", false, func(t *Transports) *bool { return &t.MetaRoCE.ReviseFirstGrant }),
	fractionKey("hint_utilization", func(t *Transports) *float64 { return &t.MetaRoCE.HintUtilization }),
	intKey("max_retries", 1, 1<<10, func(t *Transports) *int { return &t.MetaRoCE.MaxRetries }),
	intKey("rnr_retries", 1, 1<<10, func(t *Transports) *int { return &t.MetaRoCE.RNRRetries }),
	durationKey("rnr_delay", func(t *Transports) *sim.Time { return &t.MetaRoCE.RNRDelay }),
	durationKey("setup_timeout", func(t *Transports) *sim.Time { return &t.MetaRoCE.SetupTimeout }),
	intKey("send_queue", 1, 65535, func(t *Transports) *int { return &t.MetaRoCE.SendQueue }),
	intKey("recv_queue", 1, 1<<20, func(t *Transports) *int { return &t.MetaRoCE.RecvQueue }),
	intKey("dsn_window", 1, 1<<24, func(t *Transports) *int { return &t.MetaRoCE.DSNWindow }),
}

// rocev2Keys are transports.rocev2's keys, named after the verbs QP
// attributes where there is one (retry_cnt, rnr_retry, min_rnr_timer,
// max_rd_atomic).
var rocev2Keys = []optionKey[Transports]{
	{"ack_timeout", decodeAckTimeout},
	{"retry_cnt", retryKey(func(t *Transports) *int { return &t.RoCEv2.RetryCount })},
	{"rnr_retry", retryKey(func(t *Transports) *int { return &t.RoCEv2.RNRRetry })},
	{"min_rnr_timer", func(d *decoder, v *yaml.Node, p string, t *Transports) {
		var x int
		if d.int(v, p, 1, 31, &x) {
			t.RoCEv2.MinRNRTimer = uint8(x)
		}
	}},
	{"qps_per_peer", decodeQPsPerPeer},
	{"dcqcn", decodeDCQCN},
	intKey("window", 1, 1<<22-1, func(t *Transports) *int { return &t.RoCEv2.Window }),
	durationKey("window_rtt", func(t *Transports) *sim.Time { return &t.RoCEv2.WindowRTT }),
	intKey("ack_every", 1, 1<<16, func(t *Transports) *int { return &t.RoCEv2.AckEvery }),
	intKey("send_queue", 1, 1<<20, func(t *Transports) *int { return &t.RoCEv2.SendQueue }),
	intKey("recv_queue", 1, 1<<20, func(t *Transports) *int { return &t.RoCEv2.RecvQueue }),
	intKey("max_rd_atomic", 1, 255, func(t *Transports) *int { return &t.RoCEv2.MaxReads }),
	{"port", func(d *decoder, v *yaml.Node, p string, t *Transports) {
		if d.int(v, p, 0, 63, &t.RoCEv2.Port) {
			t.RoCEv2.PinPort = true
		}
	}},
	durationKey("cm_timeout", func(t *Transports) *sim.Time { return &t.RoCEv2.CMTimeout }),
	intKey("cm_retries", 1, 1<<10, func(t *Transports) *int { return &t.RoCEv2.CMRetries }),
	// Loss recovery of current NICs (docs/rocev2-baseline.md): off unless
	// the lab turns them on.
	onOffKey("selective_repeat", false, func(t *Transports) *bool { return &t.RoCEv2.SelectiveRepeat }),
	intKey("sr_window", 1, 1<<22-1, func(t *Transports) *int { return &t.RoCEv2.SRWindow }),
	onOffKey("adaptive_retrans", false, func(t *Transports) *bool { return &t.RoCEv2.AdaptiveRetrans }),
	durationKey("adaptive_min_timeout", func(t *Transports) *sim.Time { return &t.RoCEv2.AdaptiveMinTimeout }),
	onOffKey("slow_restart", false, func(t *Transports) *bool { return &t.RoCEv2.SlowRestart }),
	onOffKey("tx_window", false, func(t *Transports) *bool { return &t.RoCEv2.TxWindow }),
}

// dcqcnKeys are the keys of transports.rocev2.dcqcn when it is a mapping
// (keys not given keep rocev2.DefaultDCQCN's value).
var dcqcnKeys = []optionKey[rocev2.DCQCN]{
	fractionKey("g", func(c *rocev2.DCQCN) *float64 { return &c.G }),
	durationKey("alpha_interval", func(c *rocev2.DCQCN) *sim.Time { return &c.AlphaInterval }),
	durationKey("decrease_interval", func(c *rocev2.DCQCN) *sim.Time { return &c.DecreaseInterval }),
	durationKey("increase_interval", func(c *rocev2.DCQCN) *sim.Time { return &c.IncreaseInterval }),
	{"byte_counter", func(d *decoder, v *yaml.Node, p string, c *rocev2.DCQCN) {
		if n := d.deref(v); n != nil && n.Kind == yaml.ScalarNode && n.Value == "off" {
			c.ByteCounter = 0
			return
		}
		d.size(v, p, &c.ByteCounter)
	}},
	intKey("fast_recovery", 0, 1000, func(c *rocev2.DCQCN) *int { return &c.FastRecovery }),
	rateKey("ai", func(c *rocev2.DCQCN) *float64 { return &c.AI }),
	rateKey("hai", func(c *rocev2.DCQCN) *float64 { return &c.HAI }),
	rateKey("min_rate", func(c *rocev2.DCQCN) *float64 { return &c.MinRate }),
	onOffKey("clamp_target", false, func(c *rocev2.DCQCN) *bool { return &c.ClampTarget }),
	durationKey("cnp_interval", func(c *rocev2.DCQCN) *sim.Time { return &c.CNPInterval }),
}

// decodeAckTimeout reads the local ACK timeout: a duration (131us), or
// the verbs exponent n of 4.096us x 2^n (1..31; 14 is about 67 ms).
func decodeAckTimeout(d *decoder, v *yaml.Node, p string, t *Transports) {
	n, ok := d.scalar(v, p)
	if !ok {
		return
	}
	if n.ShortTag() == "!!int" {
		var x int
		if d.int(v, p, 1, 31, &x) {
			t.RoCEv2.Timeout, t.RoCEv2.AckTimeout = x, 0
		}
		return
	}
	var x sim.Time
	if d.duration(v, p, &x) {
		if x <= 0 {
			d.errorf(v, p, "must be above 0 (a QP without an ACK timeout never recovers a lost tail)")
			return
		}
		t.RoCEv2.AckTimeout = x
	}
}

// retryKey reads retry_cnt or rnr_retry: 0..7 as in verbs (rnr_retry 7
// means retry forever).
func retryKey(field func(*Transports) *int) func(d *decoder, v *yaml.Node, p string, t *Transports) {
	return func(d *decoder, v *yaml.Node, p string, t *Transports) {
		var x int
		if d.int(v, p, 0, 7, &x) {
			if x == 0 {
				x = rocev2.NoRetry
			}
			*field(t) = x
		}
	}
}

// decodeQPsPerPeer reads a count (1..256) or per-plane.
func decodeQPsPerPeer(d *decoder, v *yaml.Node, p string, t *Transports) {
	n, ok := d.scalar(v, p)
	if !ok {
		return
	}
	if n.Value == "per-plane" {
		t.RoCEv2QPs = PerPlane
		return
	}
	if n.ShortTag() != "!!int" {
		d.errorf(n, p, "%q is not a QP count (want a number such as 4, or per-plane)", n.Value)
		return
	}
	d.int(v, p, 1, 256, &t.RoCEv2QPs)
}

// decodeDCQCN reads on, off, or a mapping of DCQCN constants.
func decodeDCQCN(d *decoder, v *yaml.Node, p string, t *Transports) {
	if n := d.deref(v); n != nil && n.Kind == yaml.ScalarNode {
		var on bool
		if d.onOff(v, p, &on) {
			t.RoCEv2.NoDCQCN = !on
		}
		return
	}
	c := rocev2.DefaultDCQCN()
	if decodeKeys(d, v, p, dcqcnKeys, &c) != nil {
		t.RoCEv2.DCQCN, t.RoCEv2.NoDCQCN = c, false
	}
}

// decodeKeys decodes mapping v with a key table into dst.
func decodeKeys[T any](d *decoder, v *yaml.Node, path string, keys []optionKey[T], dst *T) map[string]bool {
	fields := make(map[string]fieldFunc, len(keys))
	for _, k := range keys {
		fields[k.name] = func(v *yaml.Node, p string) { k.decode(d, v, p, dst) }
	}
	return d.mapping(v, path, fields)
}

// decodeTransports reads the transports section, then lets each
// transport check the combination (an RTO floor above its ceiling, ...).
func (s *spec) decodeTransports(d *decoder, v *yaml.Node, path string) {
	t := &s.transports
	d.mapping(v, path, map[string]fieldFunc{
		"metaroce": func(v *yaml.Node, p string) {
			bad := len(d.errs)
			if decodeKeys(d, v, p, metaroceKeys, t) != nil && len(d.errs) == bad {
				if err := t.MetaRoCE.Validate(); err != nil {
					d.errorf(v, p, "%s", strings.TrimPrefix(err.Error(), "metaroce options: "))
				}
			}
		},
		"rocev2": func(v *yaml.Node, p string) {
			bad := len(d.errs)
			if decodeKeys(d, v, p, rocev2Keys, t) != nil && len(d.errs) == bad {
				if err := t.RoCEv2.Validate(); err != nil {
					d.errorf(v, p, "%s", strings.TrimPrefix(err.Error(), "rocev2 options: "))
				}
			}
		},
	})
}

// onOff decodes on/off, true/false or yes/no.
func (d *decoder) onOff(n *yaml.Node, path string, dst *bool) bool {
	s, ok := d.scalar(n, path)
	if !ok {
		return false
	}
	switch strings.ToLower(s.Value) {
	case "on", "true", "yes":
		*dst = true
	case "off", "false", "no":
		*dst = false
	default:
		d.errorf(s, path, "%q is not on or off", s.Value)
		return false
	}
	return true
}

// decodePFC reads a link's pfc: on (fabric.DefaultPFC), off, or {xoff:
// SIZE, xon: SIZE} (xon defaults to xoff minus two 4 KiB packets).
func decodePFC(d *decoder, v *yaml.Node, path string) (fabric.PFCConfig, bool) {
	if n := d.deref(v); n != nil && n.Kind == yaml.ScalarNode {
		var on bool
		if !d.onOff(v, path, &on) {
			return fabric.PFCConfig{}, false
		}
		if on {
			return fabric.DefaultPFC(), true
		}
		return fabric.PFCConfig{}, true
	}
	var c fabric.PFCConfig
	bad := len(d.errs)
	has := d.mapping(v, path, map[string]fieldFunc{
		"xoff": func(v *yaml.Node, p string) {
			if d.size(v, p, &c.XOff) && c.XOff == 0 {
				d.errorf(v, p, "must be above 0 (write pfc: off to turn PFC off)")
			}
		},
		"xon": func(v *yaml.Node, p string) { d.size(v, p, &c.XOn) },
	})
	switch {
	case has == nil || len(d.errs) > bad:
		return c, false
	case !has["xoff"]:
		d.errorf(v, path+".xoff", "missing (the ingress bytes above which the sender is paused, e.g. 64KiB)")
		return c, false
	case !has["xon"]:
		c.XOn = max(c.XOff-2*4096, 0)
	}
	if c.XOn >= c.XOff {
		d.errorf(v, path, "xon (%d bytes) must be below xoff (%d bytes)", c.XOn, c.XOff)
		return c, false
	}
	return c, true
}
