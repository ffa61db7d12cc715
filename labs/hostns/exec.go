package hostns

import (
	"fmt"
	"os/exec"
)

// Start starts cmd inside the namespace. The child is forked from an OS
// thread switched into the namespace, so it (and everything it runs) starts
// there; the calling goroutine's namespace is unchanged. Unlike `ip netns
// exec` it does not remount /sys, so /sys/class/net inside the child still
// lists the original namespace's devices; sockets, routes and interfaces
// (what ping, iperf3 and ip use) are the namespace's.
func (n *Namespace) Start(cmd *exec.Cmd) error {
	if err := n.Do(cmd.Start); err != nil {
		return fmt.Errorf("starting %s in %s: %w", cmd.Path, n.name, err)
	}
	return nil
}

// StartIn starts cmd in the namespace called name: it opens the namespace,
// starts the command there and closes its handle.
func StartIn(name string, cmd *exec.Cmd) error {
	n, err := Open(name)
	if err != nil {
		return err
	}
	defer n.Close()
	return n.Start(cmd)
}
