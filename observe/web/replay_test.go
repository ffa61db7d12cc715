package web

import (
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/labs"
	"github.com/mrlab/mrlab/observe/prototrace"
	"github.com/mrlab/mrlab/workload"
)

// faultLab is the default lab, lossier, with a spine failing during the
// run and a host link impaired one way.
const faultLab = `name: webtest
seed: 3
topology:
  leafspine: {planes: 2, leaves: 2, spines: 2, hosts_per_leaf: 2}
links:
  default: {rate: 100gbit, delay: 1us, queue: 512KiB, ecn: {step: 64KiB}}
  fabric: {impair: "loss random 0.5%"}
detection_delay: 20us
faults:
  - {at: 40us, switch: p0-spine1, action: down}
  - {at: 60us, link: h0-p1, action: impair, impair: "delay 5us", dir: ab}
  - {at: 400us, switch: p0-spine1, action: up}
`

// run is a recorded sim run and what the test saw of the lab directly.
type run struct {
	file []byte
	rec  *Recorder
	// mid and end are probe snapshots (every path) taken at the same
	// instants as two frames of the recording.
	mid, end *Snapshot
}

// recording is a lab built for a sim run with a recorder attached the way
// mrlab sim --record attaches one: trace, fabric events, faults, NICs.
type recording struct {
	lab  *labs.Lab
	loop *sim.Loop
	cl   *workload.Cluster
	rec  *Recorder
	buf  bytes.Buffer
}

// startRecording builds lab and its NICs with a recorder sampling every
// interval, and starts it.
func startRecording(t testing.TB, lab *labs.Lab, workloadName string, every sim.Time, events prototrace.FabricEvents) *recording {
	t.Helper()
	r := &recording{lab: lab, loop: sim.NewLoop()}
	pool := packet.NewPool()
	net, err := lab.Build(r.loop, pool)
	if err != nil {
		t.Fatal(err)
	}
	meta := ReplayMeta{Lab: lab.Name, Seed: lab.Seed, Workload: workloadName, Transport: "metaroce"}
	for i := range lab.Faults {
		meta.Faults = append(meta.Faults, lab.Faults[i].String())
	}
	if r.rec, err = NewRecorder(&r.buf, r.loop, net, meta, every, events); err != nil {
		t.Fatal(err)
	}
	net.SetObserver(r.rec.FabricObserver())
	if err := lab.ScheduleFaults(r.loop, net, func(now sim.Time, f *labs.Fault, err error) {
		r.rec.Fault(now, strings.TrimPrefix(f.String(), f.At.String()+" "), err)
	}); err != nil {
		t.Fatal(err)
	}
	if r.cl, err = workload.NewCluster(lab.Name, r.loop, pool, net, lab.Seed, workload.NICOptions{TraceFor: r.rec.Tracer}); err != nil {
		t.Fatal(err)
	}
	for i, nic := range r.cl.NICs {
		r.rec.AddNIC(r.cl.Hosts[i], nic)
	}
	r.rec.Start(r.loop.Now())
	return r
}

// recordRun runs a permutation on faultLab with a recorder, the way mrlab
// sim --record does.
func recordRun(t testing.TB, events prototrace.FabricEvents) *run {
	t.Helper()
	lab, err := labs.Parse("webtest.yaml", []byte(faultLab))
	if err != nil {
		t.Fatal(err)
	}
	rr := startRecording(t, lab, "permutation", 5*sim.Microsecond, events)
	loop, rec := rr.loop, rr.rec
	probe := NewProbe(rec.probe.net)
	for i, nic := range rr.cl.NICs {
		probe.AddNIC(rr.cl.Hosts[i], nic)
	}
	all := func(ConnKey) bool { return true }
	r := &run{rec: rec}
	// A frame in the middle of the run, next to a direct snapshot.
	const midT = 123456
	mark := new(sim.Timer)
	mark.Init(func(now sim.Time, _ any) {
		rec.Sample(now)
		r.mid = probe.Snapshot(now, all)
	}, nil)
	loop.Arm(mark, midT)
	res, err := workload.Run(rr.cl, workload.Spec{Name: workload.Permutation, Size: 64 << 10, Iterations: 30, QueueDepth: 4, Seed: lab.Seed})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Check.OK {
		t.Fatal("data check failed")
	}
	if r.mid == nil {
		t.Fatalf("the run ended at %v, before the mid-run frame", loop.Now())
	}
	r.end = probe.Snapshot(loop.Now(), all)
	if err := rec.Close(loop.Now()); err != nil {
		t.Fatal(err)
	}
	r.file = rr.buf.Bytes()
	return r
}

// The replay rebuilds exactly the state the lab had at each frame.
func TestRecordReplayRoundTrip(t *testing.T) {
	r := recordRun(t, prototrace.TraceDrops|prototrace.TraceMarks)
	rp, err := ReadReplay(bytes.NewReader(r.file), "run.replay")
	if err != nil {
		t.Fatal(err)
	}
	if rp.Frames() != r.rec.Frames() {
		t.Errorf("read %d frames, wrote %d", rp.Frames(), r.rec.Frames())
	}
	all := func(ConnKey) bool { return true }
	for _, want := range []*Snapshot{r.mid, r.end} {
		k := rp.FrameAt(want.T)
		if rp.times[k] != want.T {
			t.Fatalf("no frame at %v (nearest %v)", want.T, rp.times[k])
		}
		got := rp.Snapshot(k, all)
		// Rates are whole bits per second in the file; empty and nil
		// lists are the same.
		if diff := cmp.Diff(want, got, cmpopts.EquateEmpty(), cmpopts.EquateApprox(0, 1)); diff != "" {
			t.Errorf("frame %d at %v differs from the lab (-lab +replay):\n%s", k, want.T, diff)
		}
	}
	// The spine failure shows: switch down, its links down, routes
	// around it once detected.
	k := rp.FrameAt(100 * sim.Microsecond)
	s := rp.Snapshot(k, all)
	if !slices.Equal(s.SwitchDown, []string{"p0-spine1"}) {
		t.Errorf("at %v switches down: %v", s.T, s.SwitchDown)
	}
	topo := rp.Header.Topology
	dead := map[int]bool{}
	for i, l := range topo.Links {
		if l.A == "p0-spine1" || l.B == "p0-spine1" {
			dead[2*i], dead[2*i+1] = true, true
			if s.Dirs[2*i].Up || s.Dirs[2*i+1].Up {
				t.Errorf("link %s up while its spine is down", l.Name)
			}
		}
	}
	routes := 0
	for _, c := range s.Conns {
		for _, p := range c.Paths {
			if !p.Reached {
				t.Errorf("%s conn %d: a path does not reach %s after detection", c.Host, c.ID, c.Peer)
			}
			for _, d := range p.Route {
				if dead[d] {
					t.Errorf("%s conn %d: a path still crosses %s after detection", c.Host, c.ID, topo.DirName(d))
				}
			}
			routes++
		}
	}
	if routes == 0 {
		t.Fatal("no paths at 100us")
	}
	// The one-way impairment shows on one direction only.
	h0p1 := slices.IndexFunc(topo.Links, func(l TopoLink) bool { return l.Name == "h0-p1" })
	if a, b := s.Dirs[2*h0p1].Impair, s.Dirs[2*h0p1+1].Impair; a != "delay 5us" || b != "" {
		t.Errorf("h0-p1 impairments %q / %q, want the AtoB direction only", a, b)
	}
	// The faults, at their times.
	var fired []string
	for _, f := range rp.faults {
		fired = append(fired, f.T.String()+" "+f.Fault)
	}
	want := []string{"40us switch p0-spine1 down", `60us link h0-p1 impair "delay 5us" dir ab`}
	if end := rp.end; end >= 400*sim.Microsecond {
		want = append(want, "400us switch p0-spine1 up")
	}
	if diff := cmp.Diff(want, fired); diff != "" {
		t.Errorf("faults (-want +got):\n%s", diff)
	}
	if len(rp.Header.Faults) != 3 {
		t.Errorf("planned faults %v", rp.Header.Faults)
	}
}

// The trace is in the replay, and a connection's ladder holds its own and
// its peer's decisions and the fabric's events on its packets only.
func TestReplayLadder(t *testing.T) {
	r := recordRun(t, prototrace.TraceDrops)
	rp, err := ReadReplay(bytes.NewReader(r.file), "run.replay")
	if err != nil {
		t.Fatal(err)
	}
	if len(rp.events) == 0 {
		t.Fatal("no trace events in the replay")
	}
	// Find a connection that lost packets: a fabric drop names it.
	var drop *TraceEvent
	for i := range rp.events {
		if e := &rp.events[i]; e.Fabric && e.Kind == "drop" && e.HasConn && !e.Ack {
			drop = e
			break
		}
	}
	if drop == nil {
		t.Fatal("no data packet drop in the trace of a lossy run")
	}
	last := rp.Frames() - 1
	snap := rp.Snapshot(last, nil)
	var c *ConnState
	for i := range snap.Conns {
		x := &snap.Conns[i]
		if x.Host == drop.Host && x.Peer == drop.Peer && x.PeerID == drop.Conn {
			c = x
		}
	}
	if c == nil {
		t.Fatalf("no connection %s->%s with peer id %d at the end", drop.Host, drop.Peer, drop.Conn)
	}
	lad := rp.ladder(c, rp.end, 10000)
	kinds := map[string]int{}
	sawDrop := false
	for _, e := range lad {
		if !c.Involves(&e) {
			t.Errorf("ladder of %s conn %d holds %q", c.Host, c.ID, e.Text)
		}
		kinds[e.Kind]++
		sawDrop = sawDrop || (e.T == drop.T && e.Text == drop.Text)
	}
	if !sawDrop {
		t.Errorf("the drop %q is not on its connection's ladder", drop.Text)
	}
	if kinds["setup"] != 2 {
		t.Errorf("ladder has %d setup events, want both ends': %v", kinds["setup"], kinds)
	}
	if kinds["retx"]+kinds["sack-hole"]+kinds["probe"] == 0 {
		t.Errorf("a connection that lost a packet shows no recovery: %v", kinds)
	}
	// The same as filtering every event.
	var want []TraceEvent
	for _, e := range rp.events {
		if c.Involves(&e) {
			want = append(want, e)
		}
	}
	if diff := cmp.Diff(want, lad); diff != "" {
		t.Errorf("indexed ladder differs from a scan (-scan +ladder):\n%s", diff)
	}
	// Frames carry the last ladderLen events at or before their time.
	f := rp.Frame(last, -1, &c.ConnKey)
	if f.Sel == nil || !f.Sel.Found || len(f.Sel.Ladder) != min(len(want), ladderLen) {
		t.Fatalf("frame's ladder: %+v", f.Sel)
	}
	if len(f.Sel.PathRows) != c.NumPaths || f.Sel.Hist == nil || len(f.Sel.Hist.T) != min(histLen, rp.Frames()) {
		t.Errorf("frame's paths %d (want %d), history %+v", len(f.Sel.PathRows), c.NumPaths, f.Sel.Hist)
	}
}

// A gzip-compressed replay reads the same.
func TestReplayGzip(t *testing.T) {
	r := recordRun(t, 0)
	dir := t.TempDir()
	plain := filepath.Join(dir, "run.replay")
	os.WriteFile(plain, r.file, 0o644)
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write(r.file)
	zw.Close()
	gz := filepath.Join(dir, "run.replay.gz")
	os.WriteFile(gz, z.Bytes(), 0o644)
	a, err := OpenReplay(plain)
	if err != nil {
		t.Fatal(err)
	}
	b, err := OpenReplay(gz)
	if err != nil {
		t.Fatal(err)
	}
	if a.Frames() != b.Frames() || len(a.events) != len(b.events) || !cmp.Equal(a.Snapshot(a.Frames()-1, nil), b.Snapshot(b.Frames()-1, nil)) {
		t.Error("gzip replay differs from the plain one")
	}
}

func TestReadReplayErrors(t *testing.T) {
	r := recordRun(t, 0)
	lines := strings.Split(strings.TrimSpace(string(r.file)), "\n")
	header := lines[0]
	frame := ""
	for _, l := range lines {
		if strings.HasPrefix(l, `{"type":"frame"`) {
			frame = l
			break
		}
	}
	for _, tc := range []struct {
		name, file, want string
	}{
		{"empty", "", "empty file"},
		{"not json", "hello\n", "run.replay:1: header"},
		{"other format", `{"format":"pcap","version":1}`, "not a replay file"},
		{"future version", strings.Replace(header, `"version":1`, `"version":99`, 1), "version 99"},
		{"no frames", header + "\n", "no frames"},
		{"unknown record", header + "\n" + `{"type":"bogus"}`, "run.replay:2: bogus: unknown record type"},
		{"bad dir", header + "\n" + `{"type":"frame","t":0,"dirs":[[99999,1,0,0,0,0,0]]}`, "run.replay:2: frame: dirs row 0: direction 99999"},
		{"short row", header + "\n" + `{"type":"frame","t":0,"dirs":[[0,1]]}`, "2 columns, want 7"},
		{"undeclared conn", header + "\n" + `{"type":"frame","t":0,"conns":[[5,0,0,0,0,0,0,0,0,0,0,0]]}`, "connection 5 not declared"},
		{"undeclared string", header + "\n" + `{"type":"conn","n":0,"host":"h0","conn_id":1,"planes":[0]}` + "\n" +
			`{"type":"frame","t":0,"conns":[[0,7,0,0,0,0,0,0,0,0,0,0]]}`, "string 7 not declared"},
		{"no such path", header + "\n" + `{"type":"conn","n":0,"host":"h0","conn_id":1,"planes":[0]}` + "\n" +
			`{"type":"frame","t":0,"routes":[[0,3,1]]}`, "has no path 3"},
		{"time backwards", header + "\n" + frame + "\n" + strings.Replace(frame, `"t":0`, `"t":-5`, 1), "negative time"},
		{"after end", header + "\n" + frame + "\n" + `{"type":"end","t":0}` + "\n" + frame, "after the end record"},
	} {
		_, err := ReadReplay(strings.NewReader(tc.file), "run.replay")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
		}
	}
}

func FuzzReadReplay(f *testing.F) {
	r := recordRun(f, prototrace.TraceDrops)
	lines := strings.SplitAfter(string(r.file), "\n")
	// The header, the first few records and a trace line or two: small
	// seeds the fuzzer can cut up.
	f.Add(strings.Join(lines[:min(len(lines), 12)], ""))
	f.Add(lines[0] + `{"type":"frame","t":5,"dirs":[[0,1,100,200,1,2,3]],"impair":{"0":"loss 1%"},"switch_down":["p0-spine0"]}` + "\n")
	f.Fuzz(func(t *testing.T, s string) {
		rp, err := ReadReplay(strings.NewReader(s), "fuzz")
		if err != nil {
			return
		}
		// Whatever parses must play: every frame, with a selection.
		for k := range rp.Frames() {
			f := rp.Frame(k, -1, &ConnKey{"h0", 1})
			if f == nil || len(f.State) != rp.Header.Topology.NumDirs() {
				t.Fatalf("frame %d: bad frame", k)
			}
		}
	})
}
