package hostns

import (
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/mrlab/mrlab/internal/testenv"
)

// TestAlongsideIproute2 checks that namespaces made here and by `ip netns
// add` can be created and deleted in any interleaving, starting from a
// machine where NetnsDir does not exist yet (the case that used to leak a
// lab: iproute2 bound NetnsDir over itself after mrlab's mounts, hiding
// them). To start from that state without touching the machine's own
// NetnsDir, the test re-runs itself in a private mount namespace with a
// fresh tmpfs on /run; the namespaces it creates die with that mount
// namespace.
func TestAlongsideIproute2(t *testing.T) {
	testenv.RequireNamespaces(t)
	ip := testenv.RequireCommand(t, "ip")
	if os.Getenv("MRLAB_HOSTNS_PRIVATE_RUN") != "1" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestAlongsideIproute2$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), "MRLAB_HOSTNS_PRIVATE_RUN=1")
		// Go makes / private (recursively) in the child's new mount
		// namespace, so nothing it mounts propagates back.
		cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
		out, err := cmd.CombinedOutput()
		t.Logf("private run:\n%s", out)
		if err != nil {
			t.Fatalf("private run: %v", err)
		}
		if !strings.Contains(string(out), "--- PASS: TestAlongsideIproute2") {
			t.Fatal("private run did not pass")
		}
		return
	}
	if err := unix.Mount("tmpfs", "/run", "tmpfs", 0, "mode=0755"); err != nil {
		t.Fatalf("fresh /run: %v", err)
	}
	ipns := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(ip, append([]string{"netns"}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("ip netns %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	ours := func(tag string) string {
		name := testName(tag)
		n, err := Create(name)
		if err != nil {
			t.Fatal(err)
		}
		n.Close()
		return name
	}
	del := func(name string) {
		t.Helper()
		if err := Delete(name); err != nil {
			t.Fatal(err)
		}
		if Exists(name) {
			t.Fatalf("%s still exists", name)
		}
		if data, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(data), NetnsDir+"/"+name+" ") {
			t.Fatalf("%s still mounted:\n%s", name, data)
		}
	}
	other := testName("ip")

	// mrlab first, then iproute2 adds and deletes its own in between.
	a := ours("a")
	ipns("add", other)
	ipns("del", other)
	del(a)
	// iproute2's namespace outlives ours.
	b := ours("b")
	ipns("add", other)
	del(b)
	ipns("del", other)
	// iproute2 first.
	ipns("add", other)
	c := ours("c")
	ipns("del", other)
	del(c)
}
