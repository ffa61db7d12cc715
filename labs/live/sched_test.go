package live

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
)

func TestParsePolicy(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Policy
		err  string
	}{
		{"", PolicyFair, ""},
		{"fair", PolicyFair, ""},
		{"fifo", PolicyFIFO, ""},
		{"normal", PolicyNormal, ""},
		{"rt", "", `scheduling policy "rt": want one of fair, fifo, normal`},
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
// actually got, and the kernel agrees (root gets what it asks for).
func TestPolicyInForce(t *testing.T) {
	for _, tc := range []struct {
		pol  Policy
		want string
	}{
		{PolicyNormal, "normal (nice 0)"},
		{PolicyFair, "fair (SCHED_OTHER nice -20"},
		{PolicyFIFO, "fifo (SCHED_FIFO 1)"},
	} {
		t.Run(string(tc.pol), func(t *testing.T) {
			got := make(chan string, 1)
			go func() {
				// A thread of its own, retired with the goroutine (the
				// pacer's thread is never handed back either).
				runtime.LockOSThread()
				got <- applyPolicy(tc.pol)
			}()
			s := <-got
			if !strings.HasPrefix(s, tc.want) && !(tc.pol != PolicyNormal && strings.HasPrefix(s, "normal:") && strings.Contains(s, "refused")) {
				t.Errorf("applyPolicy(%s) = %q, want it to start with %q (or say it was refused)", tc.pol, s, tc.want)
			}
		})
	}
}

// TestFairPolicyAutogroup: a lab leading its session (mrlab up in the
// background) raises its session's autogroup to nice -20; a lab in
// someone else's session (this test process) leaves that session alone.
func TestFairPolicyAutogroup(t *testing.T) {
	const path = "/proc/self/autogroup"
	if os.Getenv("MRLAB_SCHED_HELPER") == "1" {
		runtime.LockOSThread()
		fmt.Println(applyPolicy(PolicyFair))
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
		done <- applyPolicy(PolicyFair)
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
