package telemetry

import (
	"bytes"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/observe/prototrace"
	"github.com/mrlab/mrlab/softnic"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/metaroce"
	"github.com/mrlab/mrlab/workload"
)

// scriptedLoss runs write_bw h0 -> h1 over MetaRoCE across a 2-spine leaf
// /spine fabric, and from 100us to 300us drops everything leaf0 sends to
// spine1 (where the seed hashes most paths): the paths hashed there lose packets, retransmit and move to new
// entropies. It returns the telemetry (10us sampling) and the protocol
// trace of the run.
func scriptedLoss(t *testing.T) ([]Sample, string) {
	t.Helper()
	topo, err := fabric.LeafSpine(fabric.LeafSpineParams{Leaves: 2, Spines: 2, HostsPerLeaf: 1,
		HostLink: fabric.LinkParams{Rate: 100e9, Delay: 500}})
	if err != nil {
		t.Fatal(err)
	}
	loop := sim.NewLoop()
	pool := packet.NewPool()
	n, err := fabric.Build(loop, pool, topo, fabric.BuildOptions{Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	var trace bytes.Buffer
	tl := prototrace.New(&trace, prototrace.Filter{Hosts: []string{"h0"}})
	names := map[netip.Addr]string{}
	for _, h := range topo.Hosts {
		names[h.Addr] = h.Name
	}
	peerName := func(a netip.Addr) string { return names[a] }
	// One NIC per host, each with its own tracer so lines say who
	// decided.
	nics := map[string]*softnic.NIC{}
	cl, err := workload.NewCluster("ls", loop, pool, n, 5, workload.NICOptions{
		Protocols: func() []transport.Protocol {
			return []transport.Protocol{metaroce.NewProtocol(metaroce.Options{Paths: 8})}
		},
		TraceFor: func(h string) transport.Tracer {
			return tl.Host(h, func(id uint32) string {
				if c := nics[h].Conn(id); c != nil {
					return names[c.Peer()]
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
	var rec Recorder
	s := NewSampler(loop, 10*sim.Microsecond, &rec)
	for i, nic := range cl.NICs {
		s.AddNIC(cl.Hosts[i], nic, peerName)
	}
	s.Start(0)
	lossy, _ := fabric.ParseImpairment("loss 100%")
	loop.At(100*sim.Microsecond, func(sim.Time) {
		if err := n.SetImpairment("p0-leaf0-spine1", fabric.AtoB, lossy); err != nil {
			t.Error(err)
		}
	})
	loop.At(300*sim.Microsecond, func(sim.Time) { n.SetImpairment("p0-leaf0-spine1", fabric.AtoB, fabric.Impairment{}) })
	_, err = workload.Run(cl, workload.Spec{Name: workload.WriteBW, Transport: transport.MetaRoCE, Size: 1 << 20, Iterations: 64, QueueDepth: 4})
	if err != nil {
		t.Fatal(err)
	}
	s.Sample(loop.Now())
	s.Stop()
	tl.Flush()

	return rec.Samples, trace.String()
}

type event struct {
	t    sim.Time
	path int
	kind string // "retx", "repath", "rto"
	from int
	to   int
	line string
}

var (
	traceLine  = regexp.MustCompile(`^t=(\S+) (\S+) conn (\d+) (.*)$`)
	retxLine   = regexp.MustCompile(`^path (\d+): (retransmit psn|SACK hole psn \d+, retransmit)`)
	rtoLine    = regexp.MustCompile(`^path (\d+): RTO \(`)
	repathLine = regexp.MustCompile(`^path (\d+) entropy (\d+) -> (\d+)`)
)

// parseTrace reads the sender's (h0 -> h1) decisions from the trace.
func parseTrace(t *testing.T, s string) []event {
	var out []event
	for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
		m := traceLine.FindStringSubmatch(line)
		if m == nil || m[2] != "h0->h1" {
			continue
		}
		at, err := sim.ParseTime(m[1])
		if err != nil {
			t.Fatalf("trace time %q: %v", m[1], err)
		}
		msg := m[4]
		if r := retxLine.FindStringSubmatch(msg); r != nil {
			p, _ := strconv.Atoi(r[1])
			out = append(out, event{t: at, path: p, kind: "retx", line: line})
		}
		if r := rtoLine.FindStringSubmatch(msg); r != nil {
			p, _ := strconv.Atoi(r[1])
			out = append(out, event{t: at, path: p, kind: "rto", line: line})
		}
		if r := repathLine.FindStringSubmatch(msg); r != nil {
			p, _ := strconv.Atoi(r[1])
			from, _ := strconv.Atoi(r[2])
			to, _ := strconv.Atoi(r[3])
			out = append(out, event{t: at, path: p, kind: "repath", from: from, to: to, line: line})
		}
	}
	return out
}

// count returns how many events of a kind (on a path, -1 for any) the
// trace has at or before a time.
func count(evs []event, kind string, path int, upTo sim.Time) uint64 {
	var n uint64
	for _, e := range evs {
		if e.kind == kind && (path < 0 || e.path == path) && e.t <= upTo {
			n++
		}
	}
	return n
}

// TestScriptedLossTelemetry: the loss reaction the transport traces —
// timeouts, entropy changes and the retransmissions they cause — shows in
// the sender's telemetry in the first sample at or after it happens, and
// not before.
func TestScriptedLossTelemetry(t *testing.T) {
	samples, trace := scriptedLoss(t)
	evs := parseTrace(t, trace)
	first := sim.Never
	for _, e := range evs {
		first = min(first, e.t)
		if e.t < 100*sim.Microsecond {
			t.Errorf("%s: before the loss started at 100us", e.line)
		}
	}
	repaths, rtos := count(evs, "repath", -1, sim.Never), count(evs, "rto", -1, sim.Never)
	t.Logf("trace: first reaction at %v, %d timeouts, %d entropy changes, %d traced retransmissions",
		first, rtos, repaths, count(evs, "retx", -1, sim.Never))
	if repaths == 0 || rtos == 0 {
		t.Fatalf("the scripted loss caused no traced timeout or entropy change:\n%s", trace)
	}

	paths := map[int][]Sample{}
	var conns []Sample
	for _, s := range samples {
		if s.Host != "h0" || s.Peer != "h1" {
			continue
		}
		switch s.Kind {
		case KindPath:
			paths[s.Path] = append(paths[s.Path], s)
		case KindConn:
			conns = append(conns, s)
		}
	}
	if len(paths) == 0 || len(conns) == 0 {
		t.Fatal("no telemetry for h0 -> h1")
	}

	// Per path: the timeout and entropy-change counters move exactly when
	// the trace says (an event at a sample's own instant may fall on
	// either side of it), and the entropy is the traced one.
	checked := 0
	for p, ser := range paths {
		for _, s := range ser {
			for _, k := range []struct {
				kind string
				got  uint64
			}{{"repath", s.EntropyChanges}, {"rto", s.Timeouts}} {
				lo, hi := count(evs, k.kind, p, s.T-1), count(evs, k.kind, p, s.T)
				if k.got < lo || k.got > hi {
					t.Errorf("path %d at %v: %s counter %d, trace says %d..%d", p, s.T, k.kind, k.got, lo, hi)
				}
			}
			checked++
		}
		for _, e := range evs {
			if e.kind != "repath" || e.path != p {
				continue
			}
			for _, s := range ser {
				if s.T < e.t && s.T >= e.t-10*sim.Microsecond && count(evs, "repath", p, e.t-1) == count(evs, "repath", p, s.T) && int(s.Entropy) != e.from {
					t.Errorf("%s: the sample at %v before it shows entropy %d", e.line, s.T, s.Entropy)
				}
				if s.T > e.t && s.T <= e.t+10*sim.Microsecond && count(evs, "repath", p, s.T) == count(evs, "repath", p, e.t) && int(s.Entropy) != e.to {
					t.Errorf("%s: the sample at %v after it shows entropy %d", e.line, s.T, s.Entropy)
				}
			}
		}
	}

	// The connection: no retransmission before the first loss reaction,
	// some within two samples after it.
	for _, s := range conns {
		if s.T < first && s.Retransmits != 0 {
			t.Errorf("%d retransmissions at %v, before the first loss reaction at %v", s.Retransmits, s.T, first)
		}
		if s.T >= first+20*sim.Microsecond && s.Retransmits == 0 {
			t.Errorf("no retransmission at %v, 20us after the loss reaction at %v", s.T, first)
			break
		}
	}
	if checked < 100 {
		t.Errorf("only %d path samples checked", checked)
	}
}
