package fabric

import (
	"cmp"
	"reflect"
	"slices"
	"testing"

	"github.com/mrlab/mrlab/internal/natural"
	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
)

// TestPortParamsCoverLinkParams: a port keeps every LinkParams field but
// the impairment (impairState holds that), so a field added to
// LinkParams must be added to portParams and paramsOf.
func TestPortParamsCoverLinkParams(t *testing.T) {
	lt, pt := reflect.TypeOf(LinkParams{}), reflect.TypeOf(portParams{})
	for i := 0; i < lt.NumField(); i++ {
		f := lt.Field(i)
		if f.Name == "Impair" {
			continue
		}
		g, ok := pt.FieldByName(f.Name)
		if !ok || g.Type != f.Type {
			t.Errorf("portParams lacks LinkParams.%s (%v)", f.Name, f.Type)
		}
	}
	if pt.NumField() != lt.NumField()-1 {
		t.Errorf("portParams has %d fields, LinkParams %d (one of them Impair)", pt.NumField(), lt.NumField())
	}
}

// TestCountersSorted: a snapshot lists links by natural name then
// direction and ports by node then port, on the first call (which sorts)
// and on later ones (which reuse the order).
func TestCountersSorted(t *testing.T) {
	topo, err := FatTree(FatTreeParams{K: 4, Planes: 2, HostLink: LinkParams{Rate: 100e9, QueueBytes: 1 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	n, err := Build(sim.NewLoop(), packet.NewPool(), topo, BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for call := range 2 {
		s := n.Counters()
		if len(s.Links) != len(n.ports) || len(s.Ports) != len(n.ports) {
			t.Fatalf("call %d: %d links, %d ports, want %d", call, len(s.Links), len(s.Ports), len(n.ports))
		}
		if !slices.IsSortedFunc(s.Links, func(a, b LinkCounters) int {
			return cmp.Or(natural.Compare(a.Link, b.Link), cmp.Compare(a.Dir, b.Dir))
		}) {
			t.Errorf("call %d: links not sorted", call)
		}
		if !slices.IsSortedFunc(s.Ports, func(a, b PortCounters) int {
			return cmp.Or(natural.Compare(a.Node, b.Node), cmp.Compare(a.Port, b.Port))
		}) {
			t.Errorf("call %d: ports not sorted", call)
		}
	}
}
