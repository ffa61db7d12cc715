package conformudp

import (
	"context"
	"io"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/mrlab/mrlab/transport/metaroce/conformance"
)

// TestUDPLoopback runs a handful of scripts over real UDP sockets on
// loopback: the tester on 127.0.0.2, the agent (mrlab's engine) on
// 127.0.0.1, same port, the control channel over TCP. No root needed.
func TestUDPLoopback(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	port := uint16(20000 + ln.Addr().(*net.TCPAddr).Port%20000)
	a := &Agent{Port: port, Addr: netip.MustParseAddr("127.0.0.1"), Logf: t.Logf}
	done := make(chan error, 1)
	go func() { done <- a.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	target := &UDPTarget{Addr: netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port),
		Control: ln.Addr().String(), Local: netip.MustParseAddr("127.0.0.2"), Dilation: 10000, Slack: 200 * time.Millisecond}
	all, err := conformance.Builtin()
	if err != nil {
		t.Fatal(err)
	}
	sel, err := conformance.Select(all, "^(setup-accept|write-single|write-hole-sack|send-recv|write-bad-rkey|malformed-crc|retx-exact-psn|dial-syn)$")
	if s := os.Getenv("CONFORM_RUN"); s != "" {
		sel, _ = conformance.Select(all, s)
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(sel) != 8 && os.Getenv("CONFORM_RUN") == "" {
		t.Fatalf("selected %d scripts, want 8", len(sel))
	}
	var trace io.Writer
	if testing.Verbose() {
		trace = os.Stderr
	}
	for _, r := range conformance.RunAll(target, sel, trace) {
		if r.Result != conformance.Pass {
			t.Errorf("%s (§%s) over UDP: %s: %s", r.Name, r.Section, r.Result, r.Detail)
		}
	}
}
