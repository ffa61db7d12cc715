package live

import (
	"runtime"
	"strings"
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
