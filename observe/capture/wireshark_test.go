package capture

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/header"
	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/internal/testenv"
	"github.com/mrlab/mrlab/workload/udpgen"
)

// corruptLab: h0 (leaf0) sends to h2 (leaf1); the leaf0->spine link flips
// a bit in every packet, two hops before h2.
func corruptLab(t *testing.T) (*sim.Loop, *packet.Pool, *fabric.Network) {
	t.Helper()
	topo, err := fabric.LeafSpine(fabric.LeafSpineParams{Leaves: 2, Spines: 1, HostsPerLeaf: 2,
		HostLink: fabric.LinkParams{Rate: 10e9, Delay: 500}, FabricLink: fabric.LinkParams{Rate: 40e9, Delay: 1000, LossAt: fabric.LossAtEnqueue}})
	if err != nil {
		t.Fatal(err)
	}
	loop, pool := sim.NewLoop(), packet.NewPool()
	n, err := fabric.Build(loop, pool, topo, fabric.BuildOptions{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	imp, _ := fabric.ParseImpairment("corrupt 100%")
	if err := n.SetImpairment("p0-leaf0-spine0", fabric.AtoB, imp); err != nil {
		t.Fatal(err)
	}
	hosts, err := udpgen.AttachAll(n, pool, loop)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hosts[0].AddFlow(udpgen.FlowSpec{Dst: hosts[2].Addr(), SrcPort: 49152, DstPort: 53791,
		Size: 600, Count: 20, ECN: header.ECNECT0}); err != nil {
		t.Fatal(err)
	}
	hosts[0].Start(1500) // the first packet leaves at 1.5us of lab time
	return loop, pool, n
}

// TestUpstreamCorruptionNoted: a packet corrupted on one link carries a
// comment saying where wherever it is captured further along, since
// Wireshark will often call it malformed.
func TestUpstreamCorruptionNoted(t *testing.T) {
	loop, _, n := corruptLab(t)
	c := newCapture(NetworkLayout(n))
	outs := map[string]*closeBuffer{}
	for _, s := range []string{"h2", "p0-leaf1-spine0:BtoA", "h0"} {
		sp, err := ParseSpec(s)
		if err != nil {
			t.Fatal(err)
		}
		outs[s] = &closeBuffer{}
		if _, err := c.add(sp, outs[s], nil); err != nil {
			t.Fatal(err)
		}
	}
	n.SetObserver(c)
	loop.Run()
	if err := c.Close(loop.Now()); err != nil {
		t.Fatal(err)
	}
	want := "corrupted upstream at p0-leaf0-spine0 (a->b) (one bit flipped by a netem corrupt impairment; Wireshark may call it malformed)"
	for name, wantComment := range map[string]string{"h2": want, "p0-leaf1-spine0:BtoA": want, "h0": ""} {
		_, pk, err := ReadAll(bytes.NewReader(outs[name].Bytes()))
		if err != nil {
			t.Fatal(err)
		}
		if len(pk) != 20 {
			t.Fatalf("%s: %d packets", name, len(pk))
		}
		for _, p := range pk {
			if p.Comment != wantComment {
				t.Fatalf("%s: comment %q, want %q", name, p.Comment, wantComment)
			}
		}
	}
}

// TestLabTimeInWireshark: the section header says timestamps are lab time
// from the epoch, and tshark -t e prints lab time exactly (the first
// packet leaves h0 at 1.5us: a sending-side tap records the start of its
// serialization).
func TestLabTimeInWireshark(t *testing.T) {
	loop, _, n := corruptLab(t)
	dir := t.TempDir()
	sp, _ := ParseSpec("h0")
	c, err := Open(dir, []Spec{sp}, NetworkLayout(n), nil)
	if err != nil {
		t.Fatal(err)
	}
	n.SetObserver(c)
	loop.Run()
	if err := c.Close(loop.Now()); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, sp.FileName())
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	r, pk, err := ReadAll(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if r.Comment != LabTimeComment || !strings.Contains(r.Comment, "1970-01-01 00:00:00 UTC is the start of the lab") {
		t.Errorf("section comment %q", r.Comment)
	}
	if pk[0].Time != 1500 {
		t.Fatalf("first packet at %v, want 1.5us", pk[0].Time)
	}
	tshark := testenv.RequireCommand(t, "tshark")
	out, err := exec.Command(tshark, "-r", file, "-t", "e", "-c", "1", "-T", "fields", "-e", "frame.time_epoch").Output()
	if err != nil {
		t.Fatalf("tshark: %v\n%s", err, out)
	}
	if got := strings.TrimSpace(string(out)); got != "0.000001500" && got != "0.000001500000" {
		t.Errorf("tshark -t e: first packet at %q, want 0.000001500 (lab time)", got)
	}
	if capinfos, err := exec.LookPath("capinfos"); err == nil { // ships with tshark
		out, err := exec.Command(capinfos, "-k", file).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "Timestamps are lab time") {
			t.Errorf("capinfos -k does not show the section comment: %v\n%s", err, out)
		}
	}
}
