package live

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mrlab/mrlab/labs/hostns"
)

// A process any of whose threads is in a lab host's network namespace
// keeps that namespace (and its mount namespace from `mrlab exec`) alive
// after its name is deleted: an unnamed namespace nobody can reach, with
// the process still waiting on a NIC that is gone. Teardown ends them.

// endGrace is how long processes in a deleted host get to exit after
// SIGTERM before SIGKILL.
const endGrace = time.Second

// nsKey identifies a namespace: its nsfs inode.
type nsKey struct{ dev, ino uint64 }

func nsOf(path string) (nsKey, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return nsKey{}, err
	}
	return nsKey{st.Dev, st.Ino}, nil
}

// processesIn returns the processes (other than this one) with a thread
// in namespace ns.
func processesIn(ns nsKey) []int {
	ents, _ := os.ReadDir("/proc")
	self := os.Getpid()
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		for _, t := range tasks {
			if k, err := nsOf(fmt.Sprintf("/proc/%d/task/%s/ns/net", pid, t.Name())); err == nil && k == ns {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

// endProcessesIn ends every process with a thread in the named namespace:
// SIGTERM, then SIGKILL for those still there after endGrace. It returns
// how many it ended.
func endProcessesIn(name string) (int, error) {
	ns, err := nsOf(filepath.Join(hostns.NetnsDir, name))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return 0, nil
		}
		return 0, fmt.Errorf("namespace %s: %w", name, err)
	}
	found := processesIn(ns)
	for _, pid := range found {
		syscall.Kill(pid, syscall.SIGTERM)
	}
	for end := time.Now().Add(endGrace); len(found) > 0 && time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if len(processesIn(ns)) == 0 {
			return len(found), nil
		}
	}
	for _, pid := range processesIn(ns) {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	// A killed process leaves the namespace when the kernel has torn it
	// down, not when the signal is sent: wait (bounded) so the caller's
	// "no process is left" holds when this returns.
	for end := time.Now().Add(endGrace); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if len(processesIn(ns)) == 0 {
			break
		}
	}
	return len(found), nil
}
