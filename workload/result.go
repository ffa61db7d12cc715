package workload

import (
	"math"
	"net/netip"
	"sort"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/softnic"
)

// Result is what a workload measured. Times are virtual.
type Result struct {
	Workload   Name   `json:"workload"`
	Transport  string `json:"transport"`
	Lab        string `json:"lab,omitempty"`
	Seed       uint64 `json:"seed"`
	Hosts      int    `json:"hosts"`
	Flows      int    `json:"flows"`
	Size       int    `json:"size_bytes"`
	Iterations int    `json:"iterations"`
	QueueDepth int    `json:"queue_depth"`
	Conns      int    `json:"conns_per_pair"`
	Streams    int    `json:"streams"`
	// MTU is the path MTU: RDMA payload bytes per packet.
	MTU int `json:"mtu"`
	// Payload is the payload mode the run used: bytes or synthetic.
	Payload string `json:"payload"`

	// Messages and Bytes count completed application messages and their
	// payload bytes (for collectives: bytes each host contributed).
	Messages int64 `json:"messages"`
	Bytes    int64 `json:"bytes"`
	// Elapsed is from the first post to the last completion.
	Elapsed sim.Time `json:"elapsed_ns"`

	// GoodputGbps is application bytes delivered per second, all flows
	// together, first post to last completion. BWAverageGbps is perftest's
	// "BW average": the same figure, or in a duration run the bytes
	// completed in the measured window (Window, excluding the margins)
	// over that window. BWPeakGbps is perftest's "BW peak" (see
	// peakGbps); 0 in duration runs, where perftest does not measure it.
	GoodputGbps   float64 `json:"goodput_gbps"`
	BWPeakGbps    float64 `json:"bw_peak_gbps"`
	BWAverageGbps float64 `json:"bw_average_gbps"`
	// MsgRateMpps is completed messages per second, in millions (in a
	// duration run, over the measured window).
	MsgRateMpps float64 `json:"msg_rate_mpps"`
	// CQMod is the CQ moderation the BW peak was computed with.
	CQMod int `json:"cq_mod,omitempty"`
	// Duration and Window are a duration run's planned length and the
	// measured window within it; WindowMessages completed in the window
	// (perftest's "#iterations" for such runs).
	Duration       sim.Time `json:"duration_ns,omitempty"`
	Window         sim.Time `json:"window_ns,omitempty"`
	WindowMessages int64    `json:"window_messages,omitempty"`
	// QPs describes the connections of the perftest tests as perftest
	// prints them (its "local address" and "remote address" lines).
	QPs []QPInfo `json:"qps,omitempty"`
	// AlgBWGbps and BusBWGbps are the collective's algorithm bandwidth
	// (size / time per operation) and NCCL's bus bandwidth (algbw x
	// 2(N-1)/N for allreduce, x (N-1)/N for alltoall).
	AlgBWGbps float64 `json:"algbw_gbps,omitempty"`
	BusBWGbps float64 `json:"busbw_gbps,omitempty"`

	// MessageTime is post-to-completion per message (for collectives:
	// per chunk WRITE); FlowTime is first post to last completion per flow
	// (for collectives: per operation).
	// Latency is the latency tests' figure computed as perftest computes
	// it (see latencyDist): one-way (half the round trip) for write_lat
	// and send_lat, the round trip for read_lat. In a duration run only
	// its Mean is set, and TPS holds the round trips per second.
	MessageTime Dist    `json:"message_time"`
	FlowTime    Dist    `json:"flow_time"`
	Latency     *Dist   `json:"latency,omitempty"`
	TPS         float64 `json:"tps,omitempty"`

	Retransmits uint64 `json:"retransmits"`
	// SpuriousLosses counts packets the senders declared lost that proved
	// to have arrived; EarlierArrived data they sent again whose earlier
	// transmission proved to have arrived (MetaRoCE; see transport.Stats).
	SpuriousLosses uint64 `json:"spurious_losses"`
	EarlierArrived uint64 `json:"earlier_arrived"`
	// Timeouts counts transport retransmission timeouts.
	Timeouts uint64 `json:"timeouts"`
	// ECNMarks counts packets the fabric marked CE; CEReceived those the
	// NICs received marked.
	ECNMarks   uint64 `json:"ecn_marks"`
	CEReceived uint64 `json:"ce_received"`
	// Drops counts dropped packets by cause, fabric and NICs together.
	Drops map[string]uint64 `json:"drops"`
	// PFCPauses counts how often PFC paused a sender (a NIC or a switch
	// port) during the run; 0 on a fabric without PFC.
	PFCPauses uint64 `json:"pfc_pauses"`
	// PlaneUtil is, per plane, the bytes the sending hosts put on that
	// plane's NIC ports over the run, as a fraction of those ports'
	// capacity.
	PlaneUtil []float64 `json:"plane_util"`
	// Corrupted counts packets the fabric's impairments flipped a bit of
	// and CorruptDropped those the receivers dropped for a bad checksum
	// (RoCEv2's ICRC at the NIC, MetaRoCE's CRC32C in the transport; the
	// same packets as "nic icrc" and the transport's checksum drops).
	// Duplicated counts copies the fabric made and DupReceived data
	// packets the receivers got again (copies and needless resends).
	Corrupted      uint64 `json:"corrupted"`
	CorruptDropped uint64 `json:"corrupt_dropped"`
	Duplicated     uint64 `json:"duplicated"`
	DupReceived    uint64 `json:"dup_received"`
	// PacketsSent counts every packet the NICs sent (data, ACKs, control).
	PacketsSent uint64 `json:"packets_sent"`

	// Errors counts completions with a non-OK status; FirstError
	// describes the first.
	Errors     int    `json:"errors"`
	FirstError string `json:"first_error,omitempty"`
	// Refused counts connection requests the run did not ask for (from a
	// host it does not connect, or beyond the connections it opens): each
	// was refused on the wire and the run went on. A dialer that repeats
	// its request before hearing the refusal is counted per request.
	Refused int `json:"refused,omitempty"`
	// Check is the data check.
	Check DataCheck `json:"data_check"`
	// Sanity compares goodput with what the lab and workload allow with
	// no loss (see Sanity); a failed one is a warning, an error with
	// mrlab sim --strict.
	Sanity Sanity `json:"sanity"`
}

// DataCheck is the data oracle's verdict: every message checked at its
// completion (Messages, Failures) and, at the end of the run, destination
// memory compared with what was sent (Regions, BadRegions).
type DataCheck struct {
	OK bool `json:"ok"`
	// Bytes is how many destination bytes were compared (message bytes and
	// the guard bytes around them, which must be untouched).
	Bytes int64 `json:"bytes_compared"`
	// Regions and BadRegions count compared message slots and those that
	// differed.
	Regions    int    `json:"regions"`
	BadRegions int    `json:"bad_regions"`
	FirstBad   string `json:"first_bad,omitempty"`
	// Messages counts messages checked whole at the instant their
	// completion was reported, MessageBytes their bytes (see oracle.go).
	// Failures counts those that were wrong then, and placements where no
	// message was due (after the slot's message completed, into a guard);
	// FirstFailure describes the first, with the first bad offset.
	Messages     int64  `json:"messages_checked"`
	MessageBytes int64  `json:"message_bytes_checked"`
	Failures     int64  `json:"failures"`
	FirstFailure string `json:"first_failure,omitempty"`
}

// checkSlot compares one receive slot, stride bytes of mem at offset at:
// its first size bytes must hold the content stream of the message seeded
// by seed, or zeros when no message landed there (landed false), and the
// rest of the slot, the guard, must be zero. where names the slot in
// FirstBad; it runs only for the first bad slot.
func (dc *DataCheck) checkSlot(mem *softnic.MR, at, size, stride int, landed bool, seed uint64, where func() string) {
	dc.Regions++
	dc.Bytes += int64(stride)
	ok := mem.IsZero(at+size, stride-size)
	if landed {
		ok = ok && mem.Matches(at, size, seed)
	} else {
		ok = ok && mem.IsZero(at, size)
	}
	if ok {
		return
	}
	dc.OK = false
	dc.BadRegions++
	if dc.FirstBad == "" {
		dc.FirstBad = where()
	}
}

// Dist summarises a set of durations.
type Dist struct {
	N     int      `json:"n"`
	Min   sim.Time `json:"min_ns"`
	P50   sim.Time `json:"p50_ns"`
	P99   sim.Time `json:"p99_ns"`
	P999  sim.Time `json:"p999_ns"`
	Max   sim.Time `json:"max_ns"`
	Mean  sim.Time `json:"mean_ns"`
	Stdev sim.Time `json:"stdev_ns"`
}

// summarize sorts ts in place and returns its distribution. Percentiles
// use the nearest-rank method.
func summarize(ts []sim.Time) Dist {
	if len(ts) == 0 {
		return Dist{}
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i] < ts[j] })
	var sum float64
	for _, t := range ts {
		sum += float64(t)
	}
	mean := sum / float64(len(ts))
	var sq float64
	for _, t := range ts {
		d := float64(t) - mean
		sq += d * d
	}
	rank := func(p float64) sim.Time {
		k := int(math.Ceil(p*float64(len(ts)))) - 1
		return ts[max(0, min(k, len(ts)-1))]
	}
	return Dist{
		N: len(ts), Min: ts[0], Max: ts[len(ts)-1],
		P50: rank(0.50), P99: rank(0.99), P999: rank(0.999),
		Mean: sim.Time(mean + 0.5), Stdev: sim.Time(math.Sqrt(sq/float64(len(ts))) + 0.5),
	}
}

// QPInfo is one connection as perftest prints it.
type QPInfo struct {
	Local, Remote Endpoint
}

// Endpoint is one end of a connection: its queue pair (connection) number
// and starting PSN, the buffer it exposes (RKey and VAddr, for WRITE and
// READ tests) and its address.
type Endpoint struct {
	Host  string     `json:"host"`
	QPN   uint32     `json:"qpn"`
	PSN   uint32     `json:"psn"`
	RKey  uint32     `json:"rkey,omitempty"`
	VAddr uint64     `json:"vaddr,omitempty"`
	Addr  netip.Addr `json:"addr"`
}

// Interval is what completed in one reporting interval of a duration run
// (perftest's --run_infinitely lines).
type Interval struct {
	Start, End sim.Time
	Size       int
	Messages   int64
	Bytes      int64
}

// Gbps returns the interval's goodput in Gbit/s.
func (iv Interval) Gbps() float64 { return gbps(iv.Bytes, iv.End-iv.Start) }

// MsgRateMpps returns the interval's message rate in millions per second.
func (iv Interval) MsgRateMpps() float64 {
	if iv.End <= iv.Start {
		return 0
	}
	return float64(iv.Messages) / (iv.End - iv.Start).Seconds() / 1e6
}
