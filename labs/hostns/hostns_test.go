package hostns

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/mrlab/mrlab/internal/testenv"
)

// testName returns a namespace name unique to this test process.
func testName(tag string) string { return fmt.Sprintf("mrlt-%d-%s", os.Getpid(), tag) }

// createNS creates a namespace and removes it (by its exact name) when the
// test ends, pass or fail.
func createNS(t *testing.T, tag string) *Namespace {
	t.Helper()
	name := testName(tag)
	n, err := Create(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		n.Close()
		if err := Delete(name); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return n
}

func TestValidName(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"mrl-default-h0", true}, {"a.b_c", true}, {"", false}, {"..", false},
		{"a/b", false}, {"a b", false}, {strings.Repeat("x", 256), false},
	} {
		if err := ValidName(tc.name); (err == nil) != tc.ok {
			t.Errorf("ValidName(%q) = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}

func TestCreateConfigureDelete(t *testing.T) {
	testenv.RequireNamespaces(t)
	before, err := TakeSnapshot(nil)
	if err != nil {
		t.Fatal(err)
	}
	n := createNS(t, "a")
	if _, err := Create(n.Name()); err == nil {
		t.Fatal("second Create of the same name succeeded")
	}
	if err := n.DisableIPv6(); err != nil {
		t.Fatal(err)
	}
	tun, err := n.OpenTUN("mr0")
	if err != nil {
		t.Fatal(err)
	}
	defer tun.Close()
	cfg := IfConfig{Addr: netip.MustParsePrefix("198.18.0.1/32"), Routes: []netip.Prefix{netip.MustParsePrefix("198.18.0.0/15")}, MTU: 1500}
	if err := n.Configure(tun, cfg); err != nil {
		t.Fatal(err)
	}
	if err := n.Configure(tun, IfConfig{Addr: netip.MustParsePrefix("198.18.0.2/32"), Routes: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}}); err == nil {
		t.Error("a default route was accepted")
	}
	inside, err := TakeSnapshot(n)
	if err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(inside.Addrs, "\n") + strings.Join(inside.Routes, "\n")
	for _, want := range []string{"mr0 198.18.0.1/32", "dst=198.18.0.0/15", "dev=mr0"} {
		if !strings.Contains(joined, want) {
			t.Errorf("namespace snapshot lacks %q:\n%s", want, joined)
		}
	}
	for _, r := range inside.Routes {
		if strings.Contains(r, "dst=<nil>") && strings.Contains(r, "table=254") {
			t.Errorf("default route in lab namespace: %s", r)
		}
	}
	// The command runs inside: it sees mr0.
	out, err := runIn(n, "ip", "-o", "addr", "show", "dev", "mr0")
	if err != nil {
		t.Fatalf("ip in namespace: %v: %s", err, out)
	}
	if !strings.Contains(out, "198.18.0.1/32") {
		t.Errorf("ip addr inside namespace: %s", out)
	}
	// /sys is the namespace's, as under ip netns exec: its devices are lo
	// and mr0, whatever the root namespace has; the root's /sys is
	// untouched.
	out, err = runIn(n, "ls", "/sys/class/net")
	if got := strings.Fields(out); err != nil || !slices.Equal(got, []string{"lo", "mr0"}) {
		t.Errorf("ls /sys/class/net inside: %q, %v; want lo and mr0", out, err)
	}
	if _, err := os.Stat("/sys/class/net/mr0"); err == nil {
		t.Errorf("mr0 shows in the root namespace's /sys")
	}
	after, err := TakeSnapshot(nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(before, after); d != "" {
		t.Errorf("root namespace changed (-before +after):\n%s", d)
	}
}

func TestDeleteIsIdempotent(t *testing.T) {
	testenv.RequireNamespaces(t)
	name := testName("del")
	n, err := Create(name)
	if err != nil {
		t.Fatal(err)
	}
	n.Close()
	for i := 0; i < 2; i++ {
		if err := Delete(name); err != nil {
			t.Fatalf("Delete #%d: %v", i+1, err)
		}
	}
	if Exists(name) {
		t.Fatal("namespace still exists")
	}
}

// TestTUNForwarding joins two namespaces' TUN devices with a copy loop and
// pings across: the plumbing a live lab's fabric sits in the middle of.
func TestTUNForwarding(t *testing.T) {
	testenv.RequireNamespaces(t)
	testenv.RequireCommand(t, "ping")
	nss, tuns := tunPair(t, "f")
	copyLoop := func(from, to *TUN) {
		bufs := make([][]byte, from.BatchSize())
		sizes := make([]int, len(bufs))
		for i := range bufs {
			bufs[i] = make([]byte, Headroom+2048)
		}
		for {
			n, err := from.Read(bufs, sizes, Headroom)
			if err != nil {
				return
			}
			out := make([][]byte, n)
			for i := range out {
				out[i] = bufs[i][:Headroom+sizes[i]]
			}
			to.Write(out, Headroom)
		}
	}
	go copyLoop(tuns[0], tuns[1])
	go copyLoop(tuns[1], tuns[0])
	out, err := runIn(nss[0], "ping", "-c", "2", "-i", "0.2", "-W", "2", "198.18.0.2")
	if err != nil {
		t.Fatalf("ping across TUNs: %v\n%s", err, out)
	}
}

// tunPair makes two namespaces named from prefix, each with a TUN mr0
// addressed 198.18.0.1 and .2 and routed to the other: the plumbing a
// live lab's fabric sits in the middle of.
func tunPair(t *testing.T, prefix string) ([2]*Namespace, [2]*TUN) {
	t.Helper()
	var tuns [2]*TUN
	var nss [2]*Namespace
	for i := range tuns {
		nss[i] = createNS(t, fmt.Sprint(prefix, i))
		if err := nss[i].DisableIPv6(); err != nil {
			t.Fatal(err)
		}
		tun, err := nss[i].OpenTUN("mr0")
		if err != nil {
			t.Fatal(err)
		}
		tuns[i] = tun
		t.Cleanup(func() { tun.Close() })
		addr := netip.AddrFrom4([4]byte{198, 18, 0, byte(1 + i)})
		if err := nss[i].Configure(tun, IfConfig{Addr: netip.PrefixFrom(addr, 32), Routes: []netip.Prefix{netip.MustParsePrefix("198.18.0.0/15")}, MTU: 1500}); err != nil {
			t.Fatal(err)
		}
	}
	return nss, tuns
}

func runIn(n *Namespace, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := n.Start(cmd); err != nil {
		return "", err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return out.String(), err
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		<-done
		return out.String(), fmt.Errorf("%s timed out", name)
	}
}

// TestDetachRuntimePoller: a TUN taken out of the Go runtime's poller is
// watched edge-triggered by no epoll of the process, still carries
// packets both ways read with TryRead (which returns at once, with
// nothing, from an empty device), and closes.
func TestDetachRuntimePoller(t *testing.T) {
	testenv.RequireNamespaces(t)
	testenv.RequireCommand(t, "ping")
	nss, tuns := tunPair(t, "d")
	for _, tun := range tuns {
		if n := edgeWatches(t, tun); n != 1 {
			t.Fatalf("an open TUN is watched edge-triggered by %d epolls of the process, want 1 (the runtime's)", n)
		}
		if err := tun.DetachRuntimePoller(); err != nil {
			t.Fatal(err)
		}
		if n := edgeWatches(t, tun); n != 0 {
			t.Fatalf("a detached TUN is watched edge-triggered by %d epolls, want 0", n)
		}
	}
	if err := tuns[0].DetachRuntimePoller(); err == nil {
		t.Error("detaching twice: no error, want one (nothing watches it)")
	}
	bufs := make([][]byte, tuns[0].BatchSize())
	sizes := make([]int, len(bufs))
	for i := range bufs {
		bufs[i] = make([]byte, Headroom+65536)
	}
	if n, err := tuns[0].TryRead(bufs, sizes, Headroom); n != 0 || err != nil {
		t.Fatalf("TryRead of an empty TUN: %d packets, %v; want 0, nil", n, err)
	}
	if a := testing.AllocsPerRun(100, func() { tuns[0].TryRead(bufs, sizes, Headroom) }); a != 0 {
		t.Errorf("TryRead of an empty TUN allocates %v times, want 0", a)
	}
	// Copy between the TUNs.
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			for i, from := range tuns {
				n, err := from.TryRead(bufs, sizes, Headroom)
				if err != nil {
					return
				}
				out := make([][]byte, n)
				for k := range out {
					out[k] = bufs[k][:Headroom+sizes[k]]
				}
				tuns[1-i].Write(out, Headroom)
			}
			time.Sleep(time.Millisecond)
		}
	}()
	out, err := runIn(nss[0], "ping", "-c", "2", "-i", "0.2", "-W", "2", "198.18.0.2")
	close(stop)
	<-done
	if err != nil {
		t.Fatalf("ping across detached TUNs: %v\n%s", err, out)
	}
	for _, tun := range tuns {
		if err := tun.Close(); err != nil {
			t.Errorf("closing a detached TUN: %v", err)
		}
	}
}

// edgeWatches counts the epolls of this process that watch t's
// descriptor edge-triggered (the Go runtime's poller does).
func edgeWatches(t *testing.T, tun *TUN) int {
	t.Helper()
	fd, err := tun.PollFD()
	if err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir("/proc/self/fdinfo")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		b, err := os.ReadFile("/proc/self/fdinfo/" + e.Name())
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(l, fmt.Sprintf("tfd: %8d events: ", fd)); ok && len(rest) >= 8 && rest[0] >= '8' {
				n++
			}
		}
	}
	return n
}
