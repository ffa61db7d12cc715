package live

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
)

func TestParsePolicy(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Policy
		err  string
	}{
		{"", PolicyDeadline, ""},
		{"deadline", PolicyDeadline, ""},
		{"fair", PolicyFair, ""},
		{"fifo", PolicyFIFO, ""},
		{"normal", PolicyNormal, ""},
		{"rt", "", `scheduling policy "rt": want one of deadline, fair, fifo, normal`},
	} {
		got, err := ParsePolicy(tc.in)
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("ParsePolicy(%q) error %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParsePolicy(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

// TestPolicyInForce: the status line names the policy the loop's thread
// actually got, and the kernel agrees (root gets what it asks for; a
// deadline thread the kernel refuses runs fair and says why).
func TestPolicyInForce(t *testing.T) {
	rt, per, _ := deadlineShare(time.Millisecond)
	for _, tc := range []struct {
		pol    Policy
		want   string
		kernel uint32 // the thread's policy as the kernel reports it
	}{
		{PolicyNormal, "normal (nice 0)", unix.SCHED_NORMAL},
		{PolicyFair, "fair (SCHED_OTHER nice -20", unix.SCHED_NORMAL},
		{PolicyFIFO, "fifo (SCHED_FIFO 1)", unix.SCHED_FIFO},
		{PolicyDeadline, fmt.Sprintf("deadline (SCHED_DEADLINE %v of every %v)", rt, per), unix.SCHED_DEADLINE},
	} {
		t.Run(string(tc.pol), func(t *testing.T) {
			type res struct {
				pol    Policy
				s      string
				kernel uint32
				err    error
			}
			got := make(chan res, 1)
			go func() {
				// A thread of its own, retired with the goroutine (the
				// pacer's thread is never handed back either).
				runtime.LockOSThread()
				pol, s := applyPolicy(tc.pol, time.Millisecond)
				attr, err := unix.SchedGetAttr(0, 0)
				var k uint32
				if err == nil {
					k = attr.Policy
				}
				got <- res{pol, s, k, err}
			}()
			r := <-got
			if r.err != nil {
				t.Fatalf("sched_getattr: %v", r.err)
			}
			switch {
			case strings.HasPrefix(r.s, tc.want):
				if r.pol != tc.pol || r.kernel != tc.kernel {
					t.Errorf("applyPolicy(%s) = %s (kernel policy %d), want %s (kernel %d)", tc.pol, r.pol, r.kernel, tc.pol, tc.kernel)
				}
			case tc.pol == PolicyDeadline && strings.HasPrefix(r.s, "fair (") && strings.Contains(r.s, "SCHED_DEADLINE refused"):
				t.Logf("deadline refused here: %s", r.s)
			case tc.pol != PolicyNormal && strings.HasPrefix(r.s, "normal:") && strings.Contains(r.s, "refused"):
				t.Logf("refused here: %s", r.s)
			default:
				t.Errorf("applyPolicy(%s) = %q, want it to start with %q (or say it was refused)", tc.pol, r.s, tc.want)
			}
		})
	}
}

// TestDeadlineShare: the deadline policy's share is the kernel's
// real-time share, its period the lag threshold within the kernel's
// bounds.
func TestDeadlineShare(t *testing.T) {
	rt, per, ok := rtLimits()
	share := 0.95
	if ok && rt >= 0 && per > 0 {
		share = float64(rt) / float64(per)
	}
	for _, tc := range []struct{ lag, period time.Duration }{
		{time.Millisecond, time.Millisecond},
		{10 * time.Microsecond, 100 * time.Microsecond},
		{5 * time.Second, time.Second},
	} {
		r, p, why := deadlineShare(tc.lag)
		if p != tc.period || r != time.Duration(share*float64(p)) || why == "" {
			t.Errorf("deadlineShare(%v) = %v of %v (%q), want %v of %v", tc.lag, r, p, why, time.Duration(share*float64(tc.period)), tc.period)
		}
	}
}

// TestFairPolicyAutogroup: a lab leading its session (mrlab up in the
// background) raises its session's autogroup to nice -20; a lab in
// someone else's session (this test process) leaves that session alone.
func TestFairPolicyAutogroup(t *testing.T) {
	const path = "/proc/self/autogroup"
	if os.Getenv("MRLAB_SCHED_HELPER") == "1" {
		runtime.LockOSThread()
		_, s := applyPolicy(PolicyFair, time.Millisecond)
		fmt.Println(s)
		b, _ := os.ReadFile(path)
		fmt.Print(string(b))
		os.Exit(0)
	}
	if _, err := os.Stat(path); err != nil {
		t.Skip("no autogroups on this kernel")
	}
	if os.Geteuid() != 0 {
		t.Skip("raising a nice level needs root")
	}
	before, _ := os.ReadFile(path)
	done := make(chan string)
	go func() {
		runtime.LockOSThread()
		_, s := applyPolicy(PolicyFair, time.Millisecond)
		done <- s
	}()
	if s := <-done; !strings.Contains(s, "does not lead the session") {
		t.Errorf("fair policy outside a session of its own: %q, want it to say the autogroup is left alone", s)
	}
	if after, _ := os.ReadFile(path); string(after) != string(before) {
		t.Errorf("this session's autogroup changed from %q to %q", before, after)
	}

	cmd := exec.Command(os.Args[0], "-test.run=^TestFairPolicyAutogroup$")
	cmd.Env = append(os.Environ(), "MRLAB_SCHED_HELPER=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper in a session of its own: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "autogroup nice -20") || !strings.HasSuffix(lines[1], "nice -20") {
		t.Errorf("session leader's fair policy and autogroup:\n%s\nwant the status to say autogroup nice -20 and /proc/self/autogroup to show it", out)
	}
}

// TestDeadlineReleased: a pacer's loop thread gives its deadline share
// back when Run returns, so the next lab in the process gets deadline too
// (a locked thread that ends on the main thread is parked, not ended, and
// kept its share: every later lab in a test binary ran fair).
func TestDeadlineReleased(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SCHED_DEADLINE needs root")
	}
	for i := range 3 {
		p, err := NewPacer(sim.NewLoop(), packet.NewPool(), PacerConfig{Policy: PolicyDeadline})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		go p.Run(ctx)
		if err := p.Do(ctx, func(sim.Time) {}); err != nil {
			t.Fatal(err)
		}
		cancel()
		<-p.Done()
		pri := p.Lag().Priority
		if strings.Contains(pri, "SCHED_DEADLINE refused") && i > 0 {
			t.Fatalf("pacer %d after %d stopped ones: %s", i, i, pri)
		}
		if i == 0 && !strings.HasPrefix(pri, "deadline") {
			t.Skipf("deadline not available here: %s", pri)
		}
	}
}
