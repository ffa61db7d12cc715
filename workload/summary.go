package workload

import (
	"fmt"

	"github.com/mrlab/mrlab/softnic"
)

// counters is a snapshot of every cumulative counter a result reports as a
// difference between the start and the end of the run.
type counters struct {
	nic      []softnic.Stats
	portTx   [][]uint64 // bytes, by NIC and port
	retx     uint64
	timeouts uint64
	spurious uint64 // losses declared that proved to have arrived
	earlier  uint64 // data sent again whose earlier transmission arrived
	fabric   FabricSnapshot
	pktsSent uint64
	ceRecv   uint64
	badSum   uint64 // transports' checksum drops (the NICs' ICRC drops are in nic)
	dups     uint64 // duplicate data packets received
}

func (r *runner) snapshot() counters {
	// Sized up front: the end-of-run snapshot is taken when the heap is
	// largest, so growth by doubling would be garbage at the peak.
	c := counters{nic: make([]softnic.Stats, 0, len(r.cl.NICs)), portTx: make([][]uint64, 0, len(r.cl.NICs))}
	for _, n := range r.cl.NICs {
		s := n.Stats()
		c.nic = append(c.nic, s)
		c.pktsSent += s.TxPackets
		c.ceRecv += s.CEReceived
		ports := make([]uint64, n.Ports())
		for p := range ports {
			ports[p] = n.PortStats(p).TxBytes
		}
		c.portTx = append(c.portTx, ports)
		ts := n.TransportTotals()
		c.retx += ts.Retransmits
		c.timeouts += ts.Timeouts
		c.spurious += ts.SpuriousLosses
		c.earlier += ts.EarlierArrived
		c.badSum += ts.ChecksumDrops
		c.dups += ts.Duplicates
	}
	if r.cl.Fabric != nil {
		c.fabric = r.cl.Fabric.Counters()
	}
	return c
}

// summarise fills the result's figures from what the run recorded.
func (r *runner) summarise(res *Result) {
	end := r.snapshot()
	b := r.base
	res.Elapsed = r.tEnd - r.t0
	res.GoodputGbps = gbps(res.Bytes, res.Elapsed)
	res.BWAverageGbps = res.GoodputGbps
	if res.Elapsed > 0 {
		res.MsgRateMpps = float64(res.Messages) / res.Elapsed.Seconds() / 1e6
	}
	if d := r.spec.Duration; d > 0 {
		// perftest measures duration runs inside the margins, and no peak.
		res.Window = d - 2*r.spec.Margin
		res.WindowMessages = r.winMsgs
		res.BWAverageGbps = gbps(r.winBytes, res.Window)
		res.MsgRateMpps = float64(r.winMsgs) / res.Window.Seconds() / 1e6
	} else if !r.spec.Name.IsLatency() {
		res.BWPeakGbps = peakGbps(r.posts, r.doneAt, r.spec.Size, r.spec.CQMod)
	}
	res.MessageTime = summarize(r.msgTimes)
	defer func() { res.Sanity = r.sanity(res) }()
	res.FlowTime = summarize(r.flowTime)
	res.Flows = res.FlowTime.N
	res.Retransmits = end.retx - b.retx
	res.Timeouts = end.timeouts - b.timeouts
	res.SpuriousLosses = end.spurious - b.spurious
	res.EarlierArrived = end.earlier - b.earlier
	res.PacketsSent = end.pktsSent - b.pktsSent
	res.CEReceived = end.ceRecv - b.ceRecv
	res.ECNMarks = end.fabric.Marks - b.fabric.Marks
	res.PFCPauses = end.fabric.PFCPauses - b.fabric.PFCPauses
	res.Corrupted = end.fabric.Corrupted - b.fabric.Corrupted
	res.Duplicated = end.fabric.Duplicated - b.fabric.Duplicated
	res.CorruptDropped = end.badSum - b.badSum
	res.DupReceived = end.dups - b.dups
	for i := range end.nic {
		res.CorruptDropped += end.nic[i].Drops[softnic.DropICRC] - b.nic[i].Drops[softnic.DropICRC]
	}
	for i := range end.nic {
		if d := end.nic[i].CQOverruns - b.nic[i].CQOverruns; d > 0 {
			res.Errors += int(d)
			if res.FirstError == "" {
				res.FirstError = fmt.Sprintf("%d completions lost to a full completion queue on %s", d, r.cl.Hosts[i])
			}
		}
	}
	res.Drops = map[string]uint64{}
	for k, v := range end.fabric.Drops {
		if d := v - b.fabric.Drops[k]; d > 0 {
			res.Drops["fabric "+k] = d
		}
	}
	for i := range end.nic {
		for _, reason := range softnic.DropReasons() {
			if d := end.nic[i].Drops[reason] - b.nic[i].Drops[reason]; d > 0 {
				res.Drops["nic "+reason.String()] += d
			}
		}
	}
	// Per-plane utilisation over the hosts that sent data (ACK-only hosts
	// would dilute it).
	planes := 0
	for _, n := range r.cl.NICs {
		planes = max(planes, n.Ports())
	}
	res.PlaneUtil = make([]float64, planes)
	capacity := make([]float64, planes)
	sent := make([]uint64, planes)
	for i, n := range r.cl.NICs {
		if !r.source[i] {
			continue
		}
		for p := range end.portTx[i] {
			sent[p] += end.portTx[i][p] - b.portTx[i][p]
			capacity[p] += n.Rate() / 8 * res.Elapsed.Seconds()
		}
	}
	for p := range res.PlaneUtil {
		if capacity[p] > 0 {
			res.PlaneUtil[p] = float64(sent[p]) / capacity[p]
		}
	}
}
