// Tests that run workloads on the shipped labs (the lab files the CLI uses).
package workload_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/labs"
	"github.com/mrlab/mrlab/workload"
)

// builder returns a function building the named built-in lab afresh.
func builder(t testing.TB, name string) func() (*workload.Cluster, error) {
	l, err := labs.Builtin(name)
	if err != nil {
		t.Fatal(err)
	}
	return func() (*workload.Cluster, error) {
		loop := sim.NewLoop()
		pool := packet.NewPool()
		net, err := l.Build(loop, pool)
		if err != nil {
			return nil, err
		}
		return workload.NewCluster(l.Name, loop, pool, net, l.Seed, workload.NICOptions{})
	}
}

// TestDefaultDemo runs the default `mrlab sim` comparison on the default
// lab and checks it is quick and correct.
func TestDefaultDemo(t *testing.T) {
	start := time.Now()
	rs, err := workload.Compare(builder(t, labs.DefaultName), workload.DemoSpec())
	wall := time.Since(start)
	var out bytes.Buffer
	if rs != nil {
		workload.WriteComparison(&out, rs)
	}
	t.Logf("wall %v\n%s", wall, out.String())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if !r.Check.OK {
			t.Errorf("%s: data check failed: %+v", r.Transport, r.Check)
		}
	}
	// What the demo is for: on the same lossy multi-plane fabric MetaRoCE
	// moves more data than RoCEv2, with fewer retransmissions.
	if m, r := rs[0], rs[1]; m.GoodputGbps <= r.GoodputGbps || m.Retransmits >= r.Retransmits {
		t.Errorf("metaroce %.1f Gb/s %d retransmissions, rocev2 %.1f Gb/s %d", m.GoodputGbps, m.Retransmits, r.GoodputGbps, r.Retransmits)
	}
}
