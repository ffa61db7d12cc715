// Package testenv lets a test say what it needs from the machine: root,
// a TUN device, a command such as tshark. Where a prerequisite is missing
// the test skips with the reason, except in CI: when MRLAB_CI=1 (.ci/run
// sets it) everything scripts/test installs must be there, so a missing
// prerequisite fails the test instead of hiding it behind a skip.
package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// CIVar is the environment variable that marks a CI run; .ci/run sets it
// to 1.
const CIVar = "MRLAB_CI"

// InCI reports whether the test runs in CI (MRLAB_CI=1).
func InCI() bool { return os.Getenv(CIVar) == "1" }

// packages names the Debian package scripts/test installs for a command.
var packages = map[string]string{
	"iperf3":   "iperf3",
	"tshark":   "tshark",
	"ip":       "iproute2",
	"ping":     "iputils-ping",
	"promtool": "prometheus",
	"cc":       "gcc",
	// The web view's browser tests (observe/web/webtest).
	"chromium": "chromium",
	// The single-node Slurm of the sweep test (cmd/mrlab); slurm-client
	// (sbatch, squeue, scancel) comes with slurmctld.
	"munged":    "munge",
	"slurmctld": "slurmctld",
	"slurmd":    "slurmd",
	"sbatch":    "slurm-client",
	"squeue":    "slurm-client",
	"scancel":   "slurm-client",
	// Unmodified ibverbs programs on libmrlab-ibverbs (cmd/mrlab's
	// TestIbverbsPrograms); libibverbs-dev's header builds the library.
	"ibv_devices":     "ibverbs-utils",
	"ibv_devinfo":     "ibverbs-utils",
	"ibv_rc_pingpong": "ibverbs-utils",
	"ib_write_bw":     "perftest",
	"ib_read_bw":      "perftest",
	"ib_send_bw":      "perftest",
	"ib_write_lat":    "perftest",
	"ib_read_lat":     "perftest",
	"ib_send_lat":     "perftest",
}

// RequireFile ends the test unless path exists; pkg is the Debian package
// scripts/test installs for it (so CI must have it).
func RequireFile(t testing.TB, path, pkg string) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		missing(t, "needs %s (scripts/test installs Debian package %s as root)", path, pkg)
	}
}

// missing ends the test for an absent prerequisite: it fails in CI and
// skips elsewhere.
func missing(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if InCI() {
		t.Fatalf("%s (%s=1: CI must have it)", msg, CIVar)
	}
	t.Skip(msg)
}

// RequireRoot ends the test unless it runs as root (network namespaces,
// links and routes need CAP_NET_ADMIN).
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		missing(t, "needs root (network namespaces)")
	}
}

// RequireTUN ends the test unless /dev/net/tun can be opened.
func RequireTUN(t testing.TB) {
	t.Helper()
	f, err := os.OpenFile("/dev/net/tun", os.O_RDWR, 0)
	if err != nil {
		missing(t, "needs /dev/net/tun: %v", err)
		return
	}
	f.Close()
}

// RequireNamespaces is RequireRoot and RequireTUN: what a test that builds
// namespaces joined by TUN devices needs.
func RequireNamespaces(t testing.TB) {
	t.Helper()
	RequireRoot(t)
	RequireTUN(t)
}

// RequireCommand ends the test unless the command is on PATH, and returns
// its path. The commands scripts/test installs (those in packages)
// must be there in CI; any other command only skips, in CI too.
func RequireCommand(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		pkg, ok := packages[name]
		if !ok {
			// Nothing installs it, so CI cannot be blamed for its absence.
			t.Skipf("needs %s, which scripts/test does not install", name)
		}
		missing(t, "needs %s (scripts/test installs Debian package %s as root)", name, pkg)
	}
	return p
}

// KnownMissVar names the file scripts/test collects known misses in.
const KnownMissVar = "MRLAB_KNOWN_MISSES"

// KnownMiss skips t as a documented target missed today ("KNOWN MISS,
// fixed by ISSUE: ...") and appends "PKG NAME (ISSUE)" to the file named
// by $MRLAB_KNOWN_MISSES, which scripts/test lists in its last line, so
// CI's summary shows every miss the suite tolerates. One short append per
// miss, so parallel test processes do not interleave.
func KnownMiss(t testing.TB, pkg, issue, format string, args ...any) {
	t.Helper()
	if path := os.Getenv(KnownMissVar); path != "" {
		if f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644); err == nil {
			fmt.Fprintf(f, "%s %s (%s)\n", pkg, t.Name(), issue)
			f.Close() // the summary is a convenience; the skip says it all
		}
	}
	t.Skipf("KNOWN MISS, fixed by %s:\n%s", issue, fmt.Sprintf(format, args...))
}
