package verbsperf

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/mrlab/mrlab/labs/uverbs/uverbstest"
	"github.com/mrlab/mrlab/verbs"
)

// TestTests runs each test between the in-process lab's two hosts, every
// byte checked, over both transports.
func TestTests(t *testing.T) {
	lab := uverbstest.Start(t, uverbstest.Options{})
	for i, c := range []Spec{
		{Test: WriteBW, Size: 64 << 10, Count: 40, Depth: 8, Transport: verbs.MetaRoCE, Verify: true},
		{Test: WriteBW, Size: 64 << 10, Count: 40, Depth: 8, Transport: verbs.RoCEv2},
		{Test: SendBW, Size: 10000, Count: 60, Depth: 4, Transport: verbs.RoCEv2, Verify: true},
		{Test: ReadBW, Size: 32 << 10, Count: 50, Depth: 4, Transport: verbs.MetaRoCE, Verify: true},
		{Test: WriteLat, Size: 2, Count: 100, Transport: verbs.MetaRoCE, Verify: true},
		{Test: WriteBW, Size: 4096, Duration: 100 * time.Millisecond, Depth: 16, Verify: true},
	} {
		t.Run(c.Test, func(t *testing.T) {
			r, s := runPair(t, lab, uint16(30000+i), c)
			t.Logf("client %+v", r)
			if r.Status != "ok" || r.Errors != 0 || r.Messages == 0 || c.Count > 0 && r.Messages != int64(c.Count) {
				t.Errorf("client result %+v", r)
			}
			if c.Verify != r.Verified || c.Verify && r.Checked != r.Messages {
				t.Errorf("verified %v, checked %d of %d", r.Verified, r.Checked, r.Messages)
			}
			if r.QP.TxPackets == 0 || r.QP.RxPackets == 0 {
				t.Errorf("connection counters %+v", r.QP)
			}
			if s == nil || s.Messages != r.Messages {
				t.Errorf("server counted %+v", s)
			}
			if c.Test == WriteLat {
				if r.Latency == nil || r.Latency.N != c.Count || r.Latency.Min <= 0 {
					t.Errorf("latency %+v", r.Latency)
				}
			} else if r.Goodput <= 0 {
				t.Errorf("goodput %v", r.Goodput)
			}
			if want := c.Transport; want != verbs.TransportDefault && r.Transport != want.String() {
				t.Errorf("transport %s, want %v", r.Transport, want)
			}
		})
	}
	lab.WaitNoClients(t, 5*time.Second)
}

// TestCheckFindsChanges: a message checks out only when every byte is
// its own, in place: a flipped bit anywhere (first byte, middle, last,
// a part word at the end), another message's bytes (the one that last
// used the slot, the next one), another connection's, or a chunk of the
// same message from another offset (a power-of-two stride, and whole
// 64 KiB pattern tables of a longer message) all fail, at the right
// offset.
// runPair runs spec between the in-process lab's two hosts, the server
// on port, and returns the client's result and the server's.
func runPair(t *testing.T, lab *uverbstest.Lab, port uint16, c Spec) (*Result, *Result) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srvDev, err := verbs.OpenEndpoint(ctx, lab.Endpoints[1])
	if err != nil {
		t.Fatal(err)
	}
	defer srvDev.Close()
	listening := make(chan struct{})
	srv := make(chan *Result, 1)
	go func() {
		r, err := Serve(ctx, srvDev, port, func(uint16) { close(listening) })
		if err != nil {
			t.Errorf("server: %v", err)
		}
		srv <- r
	}()
	<-listening
	cliDev, err := verbs.OpenEndpoint(ctx, lab.Endpoints[0])
	if err != nil {
		t.Fatal(err)
	}
	defer cliDev.Close()
	r, err := Run(ctx, cliDev, netip.AddrPortFrom(lab.NICs[1].Addr(), port), c)
	if err != nil {
		// Stop the server and wait for it: a test's goroutine may not
		// report after the test has ended.
		cancel()
		<-srv
		t.Fatalf("client: %v", err)
	}
	return r, <-srv
}

func TestCheckFindsChanges(t *testing.T) {
	s, other := &side{key: 5}, &side{key: 6}
	for _, n := range []int{1, 7, 8, 9, 4096, 3 * 4096, 64 << 10, 64<<10 + 5, 200 << 10} {
		b := make([]byte, n)
		s.fill(b, 5)
		if s.firstBad(b, 5) != -1 || s.firstBad(b, 6) < 0 || s.firstBad(b, 5-4) < 0 || other.firstBad(b, 5) < 0 {
			t.Fatalf("%d bytes: pattern check wrong (another message or connection key passes)", n)
		}
		for _, at := range []int{0, n / 2, n - 1} {
			b[at] ^= 0x10
			var res Result
			if s.check(&res, b, 5) || s.firstBad(b, 5) != at || !strings.Contains(res.FirstBad, fmt.Sprintf("byte %d of %d", at, n)) {
				t.Errorf("%d bytes: a flipped bit at %d: first bad %d, %q", n, at, s.firstBad(b, 5), res.FirstBad)
			}
			b[at] ^= 0x10
		}
		// One packet's worth (or what fits) left over from the message
		// that used the slot before, or from the next one.
		for _, m := range []uint64{1, 6} {
			c := make([]byte, n)
			s.fill(c, m)
			at := n / 3
			d := append([]byte(nil), b...)
			copy(d[at:min(at+4096, n)], c[at:])
			if got := s.firstBad(d, 5); got < at || got > at+7 {
				t.Errorf("%d bytes: message %d's bytes from %d: first bad %d", n, m, at, got)
			}
		}
		// A chunk from 4 KiB further on (a power-of-two stride) is wrong.
		if n > 8192 {
			c := append([]byte(nil), b...)
			copy(c[:4096], b[4096:8192])
			if s.firstBad(c, 5) != 0 {
				t.Errorf("a chunk from 4 KiB on passes at offset 0")
			}
		}
		// Past 64 KiB the table repeats under another salt: a whole
		// table's bytes from the next repetition are wrong.
		if n >= 128<<10 {
			c := append([]byte(nil), b...)
			copy(c[:64<<10], b[64<<10:128<<10])
			if s.firstBad(c, 5) != 0 {
				t.Errorf("%d bytes: the second 64 KiB in place of the first passes", n)
			}
		}
	}
}
