package workload

import (
	"errors"
	"testing"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/softnic"
	"github.com/mrlab/mrlab/transport"
)

// TestUnsolicitedConnectionRefused: while h0 writes to h1, h2 (a host the
// run does not connect) dials h1 and h0 dials h1 once more than the run
// asked for. Both are refused on the wire and counted (with any repeats of
// their requests); the run completes with its data verified.
func TestUnsolicitedConnectionRefused(t *testing.T) {
	for _, kind := range []transport.Kind{transport.MetaRoCE, transport.RoCEv2} {
		t.Run(kind.String(), func(t *testing.T) {
			cl, _ := lab{hosts: 4, leaves: 2}.build(t)
			var res *Result
			var rerr error
			fin := false
			spec := Spec{Name: WriteBW, Transport: kind, Size: 64 << 10, Iterations: 200, From: []string{"h0"}, To: []string{"h1"}}
			if err := Start(cl, spec, func(r *Result, err error) { res, rerr, fin = r, err, true }); err != nil {
				t.Fatal(err)
			}
			var strays []*softnic.Conn
			for _, from := range []int{2, 0} {
				c, err := cl.NICs[from].Dial(cl.NICs[1].Addr(), softnic.ConnOptions{Transport: kind, PD: cl.NICs[from].AllocPD()})
				if err != nil {
					t.Fatal(err)
				}
				strays = append(strays, c)
				cl.Loop.RunUntil(cl.Loop.Now() + 50*sim.Microsecond)
			}
			for !fin && cl.Loop.Step() {
			}
			if rerr != nil || res == nil || !res.Check.OK || res.Messages != 200 {
				t.Fatalf("run with stray connections: %v %+v", rerr, res)
			}
			// A dialer may repeat its request before it hears the refusal:
			// each request is refused and counted.
			if res.Refused < 2 || uint64(res.Refused) != cl.NICs[1].Stats().Refused {
				t.Errorf("refused: result %d, NIC %d; want the same, at least 2", res.Refused, cl.NICs[1].Stats().Refused)
			}
			for _, c := range strays {
				if s := c.State(); s == transport.StateEstablished {
					t.Errorf("stray connection from %s still %v after the refusal", c.NIC().Name(), s)
				}
			}
		})
	}
}

// TestCancel: a cancelled run ends at once with ErrCancelled and closes
// its connections, so the cluster can run another.
func TestCancel(t *testing.T) {
	cl, _ := lab{hosts: 2}.build(t)
	var rerr error
	fin := false
	h, err := Launch(cl, Spec{Name: WriteBW, Size: 64 << 10, Duration: sim.Second}, func(r *Result, err error) { rerr, fin = err, true })
	if err != nil {
		t.Fatal(err)
	}
	cl.Loop.RunUntil(cl.Loop.Now() + sim.Millisecond)
	h.Cancel(errors.New("client went away"))
	if !fin || !errors.Is(rerr, ErrCancelled) {
		t.Fatalf("after Cancel: finished %v, error %v", fin, rerr)
	}
	res, err := Run(cl, Spec{Name: WriteBW, Size: 64 << 10, Iterations: 50})
	if err != nil || !res.Check.OK {
		t.Fatalf("run after a cancelled one: %v %+v", err, res)
	}
}
