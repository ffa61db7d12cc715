package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// recorder is a testing.TB that notes how a test ended.
type recorder struct {
	testing.TB
	ended string // "skip", "fatal" or "" (went on)
	msg   string
}

func (r *recorder) Helper() {}
func (r *recorder) Skip(args ...any) {
	r.ended, r.msg = "skip", fmt.Sprint(args...)
	runtime.Goexit()
}
func (r *recorder) Skipf(format string, args ...any) {
	r.ended, r.msg = "skip", fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (r *recorder) Fatalf(format string, args ...any) {
	r.ended, r.msg = "fatal", fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run calls f with a recorder on its own goroutine (Skip and Fatal end it).
func run(f func(testing.TB)) *recorder {
	r := &recorder{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r
}

func TestMissingPrerequisite(t *testing.T) {
	tests := []struct {
		name string
		ci   string
		f    func(testing.TB)
		want string
	}{
		{"unknown command, missing outside CI", "", func(tb testing.TB) { RequireCommand(tb, "tshark-not-here") }, "skip"},
		{"command scripts/test installs, missing outside CI", "", withPackage("mrlab-test-cmd", RequireCommand), "skip"},
		{"command scripts/test installs, missing in CI", "1", withPackage("mrlab-test-cmd", RequireCommand), "fatal"},
		{"command nothing installs, missing in CI", "1", func(tb testing.TB) { RequireCommand(tb, "mrlab-no-such-command") }, "skip"},
		{"present command in CI", "1", func(tb testing.TB) { RequireCommand(tb, "go") }, ""},
		{"CI flag other than 1", "yes", withPackage("mrlab-test-cmd", RequireCommand), "skip"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(CIVar, tt.ci)
			r := run(tt.f)
			if r.ended != tt.want {
				t.Errorf("ended with %q (%s), want %q", r.ended, r.msg, tt.want)
			}
		})
	}
}

// withPackage registers name as a command scripts/test installs for the
// length of the call.
func withPackage(name string, require func(testing.TB, string) string) func(testing.TB) {
	return func(tb testing.TB) {
		packages[name] = "mrlab-test-pkg"
		defer delete(packages, name)
		require(tb, name)
	}
}

func (r *recorder) Name() string { return "TestX" }

// TestKnownMiss: a known miss skips with its issue and message and leaves
// one line for scripts/test's summary; without the file it only skips.
func TestKnownMiss(t *testing.T) {
	path := filepath.Join(t.TempDir(), "misses")
	for _, file := range []string{path, ""} {
		t.Setenv(KnownMissVar, file)
		r := run(func(tb testing.TB) { KnownMiss(tb, "pkg", "#1", "lost %d%%", 31) })
		if r.ended != "skip" || r.msg != "KNOWN MISS, fixed by #1:\nlost 31%" {
			t.Errorf("ended %q with %q", r.ended, r.msg)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil || string(got) != "pkg TestX (#1)\n" {
		t.Errorf("summary file %q (%v), want one line", got, err)
	}
}
