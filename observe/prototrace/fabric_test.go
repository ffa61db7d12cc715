package prototrace

import (
	"bytes"
	"net/netip"
	"regexp"
	"strings"
	"testing"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/softnic"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/metaroce"
	"github.com/mrlab/mrlab/workload"
)

// lossyRun runs write_bw h0 -> h1 over MetaRoCE on a back-to-back pair of
// planes losing 1% of the data, tracing both hosts and the fabric's drops.
func lossyRun(t *testing.T, f Filter) string {
	t.Helper()
	topo, err := fabric.BackToBack(fabric.BackToBackParams{Planes: 2, Link: fabric.LinkParams{Rate: 100e9, Delay: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	loop := sim.NewLoop()
	pool := packet.NewPool()
	n, err := fabric.Build(loop, pool, topo, fabric.BuildOptions{Seed: 9})
	if err != nil {
		t.Fatal(err)
	}
	loss, _ := fabric.ParseImpairment("loss 1%")
	for _, l := range []string{"p0-h0-h1", "p1-h0-h1"} {
		n.SetImpairment(l, fabric.AtoB, loss)
	}
	var out bytes.Buffer
	log := New(&out, f)
	names := map[netip.Addr]string{}
	for _, h := range topo.Hosts {
		names[h.Addr] = h.Name
	}
	name := func(a netip.Addr) string { return names[a] }
	n.SetObserver(log.Fabric(n, name, TraceDrops))
	cl := tracedCluster(t, loop, pool, n, 9, metaroce.Options{Paths: 4}, log.Host, name)
	if _, err := workload.Run(cl, workload.Spec{Name: workload.WriteBW, Transport: transport.MetaRoCE, Size: 1 << 20, Iterations: 8}); err != nil {
		t.Fatal(err)
	}
	if err := log.Flush(); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

// tracedCluster builds a NIC for every host of n, each with its own tracer
// from host (Log.Host or Hub.Host) whose lines name the peer of a
// connection with name.
func tracedCluster(t *testing.T, loop *sim.Loop, pool *packet.Pool, n *fabric.Network, seed uint64, opts metaroce.Options,
	host func(string, PeerFunc) transport.Tracer, name func(netip.Addr) string) *workload.Cluster {
	t.Helper()
	nics := map[string]*softnic.NIC{}
	cl, err := workload.NewCluster("traced", loop, pool, n, seed, workload.NICOptions{
		Protocols: func() []transport.Protocol { return []transport.Protocol{metaroce.NewProtocol(opts)} },
		TraceFor: func(h string) transport.Tracer {
			return host(h, func(id uint32) string {
				if c := nics[h].Conn(id); c != nil {
					return name(c.Peer())
				}
				return ""
			})
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, nic := range cl.NICs {
		nics[cl.Hosts[i]] = nic
	}
	return cl
}

var (
	dropRe = regexp.MustCompile(`^t=(\S+) fabric: drop \((?:impairment|fcs-error)\) at p\d-h0-h1:AtoB h0->h1 conn \d+ path (\d+) psn (\d+) (WRITE|PROBE)`)
	holeRe = regexp.MustCompile(`^t=(\S+) h0->h1 conn \d+ path (\d+): SACK hole psn (\d+), retransmit$`)
)

// TestTraceExplainsLoss: every SACK-hole retransmission in the trace is
// preceded by the fabric's drop of that very packet (same path and PSN),
// and the drop lines name the lossy link.
func TestTraceExplainsLoss(t *testing.T) {
	trace := lossyRun(t, Filter{})
	type key struct{ path, psn string }
	dropped := map[key]sim.Time{}
	holes := 0
	for _, line := range strings.Split(trace, "\n") {
		if m := dropRe.FindStringSubmatch(line); m != nil {
			at, _ := sim.ParseTime(m[1])
			dropped[key{m[2], m[3]}] = at
			continue
		}
		if strings.Contains(line, "fabric:") && line != "" {
			t.Errorf("unexpected fabric line %q", line)
		}
		if m := holeRe.FindStringSubmatch(line); m != nil {
			holes++
			at, _ := sim.ParseTime(m[1])
			d, ok := dropped[key{m[2], m[3]}]
			if !ok || d >= at {
				t.Errorf("%q: no earlier drop of path %s psn %s in the trace", line, m[2], m[3])
			}
		}
	}
	t.Logf("%d drops, %d SACK-hole retransmissions", len(dropped), holes)
	if holes == 0 || len(dropped) == 0 {
		t.Fatalf("no loss recovery traced:\n%s", trace)
	}
}

// TestFabricTraceFilters: the fabric lines obey the log's filters.
func TestFabricTraceFilters(t *testing.T) {
	all := lossyRun(t, Filter{})
	one := lossyRun(t, Filter{Paths: []int{2}, Contains: "fabric"})
	none := lossyRun(t, Filter{Hosts: []string{"h7"}})
	var want []string
	for _, line := range strings.Split(all, "\n") {
		if strings.Contains(line, "fabric") && strings.Contains(line, " path 2 ") {
			want = append(want, line)
		}
	}
	got := strings.Split(strings.TrimSpace(one), "\n")
	if len(want) == 0 || strings.Join(want, "\n") != strings.Join(got, "\n") {
		t.Errorf("path 2 fabric lines: got %d, want %d", len(got), len(want))
	}
	if none != "" {
		t.Errorf("host filter let through:\n%s", none)
	}
}
