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
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			srvDev, err := verbs.OpenEndpoint(ctx, lab.Endpoints[1])
			if err != nil {
				t.Fatal(err)
			}
			defer srvDev.Close()
			port := uint16(30000 + i)
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
				t.Fatal(err)
			}
			s := <-srv
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

func TestCheckFindsChanges(t *testing.T) {
	s, other := &side{key: 5}, &side{key: 6}
	for _, n := range []int{1, 7, 8, 9, 4096, 3 * 4096} {
		b := make([]byte, n)
		s.fill(b, 5)
		if s.firstBad(b, 5) != -1 || s.firstBad(b, 6) < 0 || other.firstBad(b, 5) < 0 {
			t.Fatalf("%d bytes: pattern check wrong (another message or connection key passes)", n)
		}
		b[n/2] ^= 1
		var res Result
		if s.check(&res, b, 5) || s.firstBad(b, 5) != n/2 || !strings.Contains(res.FirstBad, fmt.Sprintf("byte %d of %d", n/2, n)) {
			t.Errorf("%d bytes: a flipped bit at %d: first bad %d, %q", n, n/2, s.firstBad(b, 5), res.FirstBad)
		}
		b[n/2] ^= 1
		// A chunk from 4 KiB further on (a power-of-two stride) is wrong.
		if n > 8192 {
			c := append([]byte(nil), b...)
			copy(c[:4096], b[4096:8192])
			if s.firstBad(c, 5) != 0 {
				t.Errorf("a chunk from 4 KiB on passes at offset 0")
			}
		}
	}
}
