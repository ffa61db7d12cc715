package live

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"

	"github.com/mrlab/mrlab/internal/testenv"
	"github.com/mrlab/mrlab/labs/hostns"
)

// TestDeleteNamespaceEndsProcesses: a process started in a host (as
// mrlab exec does, with its own mount namespace) and one that ignores
// SIGTERM are both gone once SystemOps deletes the namespace, so nothing
// keeps it alive unnamed.
func TestDeleteNamespaceEndsProcesses(t *testing.T) {
	testenv.RequireNamespaces(t)
	name := fmt.Sprintf("mrlt-%d-procs", os.Getpid())
	ns, err := hostns.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hostns.Delete(name) })
	key, err := nsOf(hostns.NetnsDir + "/" + name)
	if err != nil {
		t.Fatal(err)
	}
	var cmds []*exec.Cmd
	for _, script := range []string{"exec sleep 60", "trap '' TERM; sleep 60 & wait"} {
		cmd := exec.Command("sh", "-c", script)
		if err := ns.Start(cmd); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	ns.Close()
	if got := len(processesIn(key)); got < 2 {
		t.Fatalf("%d processes in the namespace, want at least 2", got)
	}
	if err := (SystemOps{}).DeleteNamespace(name); err != nil {
		t.Fatal(err)
	}
	for _, c := range cmds {
		err := c.Wait()
		ws, _ := c.ProcessState.Sys().(syscall.WaitStatus)
		if !ws.Signaled() {
			t.Errorf("%v: %v, want killed by a signal", c.Args, err)
		}
	}
	if left := processesIn(key); len(left) > 0 {
		t.Errorf("processes %v still in the deleted namespace", left)
	}
	if hostns.Exists(name) {
		t.Errorf("namespace %s still named", name)
	}
}
