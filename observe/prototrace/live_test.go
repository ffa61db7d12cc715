package prototrace

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/observe/capture"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/metaroce"
	"github.com/mrlab/mrlab/workload"
)

// TestHub: a reader subscribed over HTTP gets the lines its filter keeps
// (transport decisions and fabric drops); with no reader nothing is
// formatted.
func TestHub(t *testing.T) {
	topo, _ := fabric.BackToBack(fabric.BackToBackParams{Planes: 2, Link: fabric.LinkParams{Rate: 100e9, Delay: 1000}})
	loop := sim.NewLoop()
	pool := packet.NewPool()
	n, err := fabric.Build(loop, pool, topo, fabric.BuildOptions{Seed: 9})
	if err != nil {
		t.Fatal(err)
	}
	loss, _ := fabric.ParseImpairment("loss 1%")
	n.SetImpairment("p0-h0-h1", fabric.AtoB, loss)
	names := map[netip.Addr]string{}
	for _, h := range topo.Hosts {
		names[h.Addr] = h.Name
	}
	hub := NewHub(n, func(a netip.Addr) string { return names[a] })
	n.SetObserver(capture.Tee(hub.Fabric()))
	cl := tracedCluster(t, loop, pool, n, 9, metaroce.Options{Paths: 4}, hub.Host, func(a netip.Addr) string { return names[a] })
	var spy spy
	hub.Host("h9", nil).Tracef(0, 1, "%v", &spy)
	if spy.calls != 0 {
		t.Error("formatted a line with no reader")
	}

	srv := httptest.NewServer(hub)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/trace?filter=host=h0,path=0&fabric=drops")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	for deadline := time.Now().Add(5 * time.Second); hub.Readers() != 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("reader never subscribed")
		}
	}
	if _, err := workload.Run(cl, workload.Spec{Name: workload.WriteBW, Transport: transport.MetaRoCE, Size: 1 << 20, Iterations: 8}); err != nil {
		t.Fatal(err)
	}
	hub.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(body)), "\n")
	var holes, drops int
	for _, l := range lines {
		switch {
		case strings.Contains(l, "h0->h1 conn 1 path 0: SACK hole"):
			holes++
		case (strings.Contains(l, "fabric: drop (impairment)") || strings.Contains(l, "fabric: drop (fcs-error)")) && strings.Contains(l, " path 0 "):
			drops++
		case strings.Contains(l, " path ") && !strings.Contains(l, "path 0"):
			t.Errorf("filter let through %q", l)
		}
	}
	if holes == 0 || drops == 0 {
		t.Errorf("%d holes, %d drops in:\n%s", holes, drops, body)
	}
	if resp, err := http.Get(srv.URL + "/trace?fabric=everything"); err != nil || resp.StatusCode != 400 {
		t.Errorf("bad fabric= accepted: %v %v", resp.StatusCode, err)
	}
}
