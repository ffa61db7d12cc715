package conformudp

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/mrlab/mrlab/internal/testenv"
	"github.com/mrlab/mrlab/labs"
	"github.com/mrlab/mrlab/labs/hostns"
	"github.com/mrlab/mrlab/labs/live"
	"github.com/mrlab/mrlab/labs/live/livetest"
	"github.com/mrlab/mrlab/transport/metaroce/conformance"
)

// liveScripts are the tests the live-lab run covers: one or more per spec
// section, each a few hundred microseconds of script time (a second or
// two of wall time at the test's dilation).
const liveScripts = "^(setup-accept|setup-version-mismatch|dial-syn|write-single|write-out-of-order|write-hole-sack|sack-bit255|" +
	"send-recv|send-rnr|write-bad-rkey|read-responder|malformed-crc|malformed-truncated|ecn-echo|retx-exact-psn|" +
	"retx-no-go-back-n|gen-reset|close-by-tester)$"

// TestUDPLiveLab runs the suite with --target udp: in a live lab: the b2b
// lab's two hosts are real namespaces joined by their software NICs and the
// emulated link; the tester runs in h0, mrlab's engine (the conformance
// agent) in h1, and every packet crosses h0's NIC, the link and h1's NIC.
func TestUDPLiveLab(t *testing.T) {
	testenv.RequireNamespaces(t)
	lab, err := labs.Builtin("b2b")
	if err != nil {
		t.Fatal(err)
	}
	eng, err := live.NewLabEngine(lab, live.EngineConfig{MaxRate: live.DefaultMaxRate})
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("cf%d", os.Getpid()%100000)
	_, st := livetest.Up(t, name, eng, live.Options{MTU: 9000})
	if len(st.Hosts) != 2 {
		t.Fatalf("b2b lab has %d hosts", len(st.Hosts))
	}
	open := func(h live.StateHost) (*hostns.Namespace, netip.Addr) {
		ns, err := hostns.Open(h.Namespace)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ns.Close() })
		return ns, netip.MustParseAddr(h.Addr)
	}
	ns0, addr0 := open(st.Hosts[0])
	ns1, addr1 := open(st.Hosts[1])

	var ln net.Listener
	if err := ns1.Do(func() error {
		var err error
		ln, err = net.Listen("tcp4", net.JoinHostPort(addr1.String(), strconv.Itoa(conformance.ControlPort)))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	a := &Agent{Addr: addr1, InNS: ns1.Do}
	done := make(chan error, 1)
	go func() { done <- a.Serve(ctx, ln) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()

	all, err := conformance.Builtin()
	if err != nil {
		t.Fatal(err)
	}
	sel, err := conformance.Select(all, liveScripts)
	if err != nil {
		t.Fatal(err)
	}
	if len(sel) != 18 {
		t.Fatalf("selected %d scripts, want 18", len(sel))
	}
	target := &UDPTarget{Addr: netip.AddrPortFrom(addr1, DefaultUDPPort), Local: addr0, InNS: ns0.Do,
		Dilation: 10000, Slack: 200 * time.Millisecond}
	sections := map[string]bool{}
	for _, r := range conformance.RunAll(target, sel, nil) {
		sections[r.Section] = true
		if r.Result != conformance.Pass {
			t.Errorf("%s (§%s) over the live lab: %s: %s", r.Name, r.Section, r.Result, r.Detail)
		}
	}
	t.Logf("%d tests over UDP through the live lab, sections %v", len(sel), sections)
}
