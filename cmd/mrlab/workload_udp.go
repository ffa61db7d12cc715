package main

import (
	"fmt"
	"net/netip"

	"github.com/urfave/cli/v2"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/header"
	"github.com/mrlab/mrlab/workload/udpgen"
)

// The udp workload makes the fabric visible end to end before any
// transport exists: paced UDP flows in a fixed permutation, one flow per
// host and plane.
func init() {
	registerWorkload(workloadDef{
		Name:  "udp",
		Usage: "paced UDP: host i sends to host (i + N/2) mod N on every plane (crossing leaves in the builders' labs), each flow at --load of its link rate",
		Flags: []cli.Flag{
			&cli.Float64Flag{Name: "load", Value: 0.5, Usage: "udp: each flow's rate as a fraction of its host link's rate (0 < load <= 1)"},
		},
		New: newUDPWorkload,
	})
}

// udpDstPort is the flows' UDP destination port (the discard service; no
// transport listens there).
const udpDstPort = 9

// udpSrcPortBase is the first flow's UDP source port; each flow has its
// own, which is its ECMP entropy.
const udpSrcPortBase = 49152

type udpFlow struct {
	name       string
	src, dst   *udpgen.Host
	plane      int
	index      int // in src's flows
	sport      uint16
	offeredBps float64
}

type udpWorkload struct {
	hosts []*udpgen.Host
	flows []udpFlow
}

func newUDPWorkload(env *simEnv) (simWorkload, error) {
	load, size := env.Ctx.Float64("load"), 4096
	if !(load > 0 && load <= 1) {
		return nil, usagef("--load %v: want a fraction in (0, 1]", load)
	}
	if env.Ctx.IsSet("size") {
		n, err := parseMsgSize(env.Ctx.String("size"))
		if err != nil || n < udpgen.MinSize || n > 9216 {
			return nil, usagef("--size %q: the udp workload's IPv4 packet size, %d..9216 bytes", env.Ctx.String("size"), udpgen.MinSize)
		}
		size = n
	}
	hosts, err := udpgen.AttachAll(env.Net, env.Pool, env.Loop)
	if err != nil {
		return nil, err
	}
	topo := env.Lab.Topology()
	// rate of each host port: the link's rate in the direction leaving
	// the host.
	portRate := map[fabric.Endpoint]float64{}
	for _, k := range topo.Links {
		portRate[k.A] = k.Params.Rate
		portRate[k.B] = k.Params.Rate
	}
	w := &udpWorkload{hosts: hosts}
	n := len(hosts)
	if n < 2 {
		return nil, fmt.Errorf("the udp workload needs at least 2 hosts, lab %s has %d", env.Lab.Name, n)
	}
	for i, src := range hosts {
		dst := hosts[(i+n/2)%n]
		for p := 0; p < topo.Hosts[i].Ports; p++ {
			sport := uint16(udpSrcPortBase + len(w.flows)%16384)
			rate := load * portRate[fabric.Endpoint{Node: src.Name(), Port: p}]
			name := fmt.Sprintf("%s->%s p%d", src.Name(), dst.Name(), p)
			idx, err := src.AddFlow(udpgen.FlowSpec{
				Name: name, Dst: dst.Addr(), SrcPort: sport, DstPort: udpDstPort,
				Plane: p, Size: size, Rate: rate, ECN: header.ECNECT0,
			})
			if err != nil {
				return nil, err
			}
			w.flows = append(w.flows, udpFlow{name: name, src: src, dst: dst, plane: p, index: idx, sport: sport, offeredBps: rate})
		}
	}
	return w, nil
}

// Start starts every host's flows now.
func (w *udpWorkload) Start(env *simEnv) error {
	for _, h := range w.hosts {
		h.Start(env.Loop.Now())
	}
	return nil
}

// Stop stops sending; packets in flight keep going.
func (w *udpWorkload) Stop() {
	for _, h := range w.hosts {
		h.Stop()
	}
}

// Report adds the flows table and the totals.
func (w *udpWorkload) Report(env *simEnv, r *Report) {
	type key struct {
		src   netip.Addr
		sport uint16
	}
	recv := map[key]udpgen.RecvStats{}
	for _, h := range w.hosts {
		for _, rs := range h.Received() {
			recv[key{rs.Src, rs.SrcPort}] = rs
		}
	}
	secs := env.Duration.Seconds()
	t := r.Table("flows", "Flows (lost = sent - received, after packets in flight drained)",
		Col("flow", "flow", ""), Col("offered_gbps", "offered Gbit/s", "%.2f"), Col("delivered_gbps", "delivered Gbit/s", "%.2f"),
		Col("sent", "sent", ""), Col("received", "received", ""), Col("lost", "lost", ""), Col("loss_pct", "loss %", "%.3f"),
		Col("ce", "CE marked", ""), Col("out_of_order", "reordered", ""), Col("duplicates", "duplicates", ""))
	var sent, got uint64
	var offered, delivered float64
	for _, f := range w.flows {
		st := f.src.Stats()[f.index]
		rs := recv[key{f.src.Addr(), f.sport}]
		// Packets counts duplicates made by an impairment; lost counts
		// distinct packets that never arrived.
		distinct := rs.Packets - rs.Duplicates
		lost := uint64(0)
		if st.Sent > distinct {
			lost = st.Sent - distinct
		}
		loss := 0.0
		if st.Sent > 0 {
			loss = 100 * float64(lost) / float64(st.Sent)
		}
		// Packets that arrive while the run drains stretch the window, so
		// delivered never exceeds offered.
		window := max(secs, rs.Last.Seconds())
		gbps := float64(rs.Bytes) * 8 / window / 1e9
		t.Add(f.name, f.offeredBps/1e9, gbps, st.Sent, distinct, lost, loss, rs.CE, rs.OutOfOrder, rs.Duplicates)
		sent += st.Sent
		got += distinct
		offered += f.offeredBps / 1e9
		delivered += gbps
	}
	lossPct := 0.0
	if sent > got && sent > 0 {
		lossPct = 100 * float64(sent-got) / float64(sent)
	}
	r.Fact("offered_gbps", "offered Gbit/s", offered)
	r.Fact("delivered_gbps", "delivered Gbit/s", delivered)
	r.Fact("loss_pct", "loss %", lossPct)
}
