package hostns

import (
	"fmt"
	"os/exec"
	"runtime"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Start starts cmd inside the namespace, as `ip netns exec` does: the
// child is forked from an OS thread switched into the network namespace
// and into a mount namespace of its own where /sys is a fresh sysfs, so
// /sys/class/net (and everything else under /sys/class/net's view: udev
// tools, ibverbs' sysfs scans) shows the namespace's devices, not the
// root's. Mounts stay private to the child: nothing propagates back to the
// machine. The calling goroutine's namespaces are unchanged; the thread
// that forked is retired rather than returned to the runtime, since it
// cannot leave its mount namespace.
func (n *Namespace) Start(cmd *exec.Cmd) error {
	errc := make(chan error, 1)
	go func() {
		// Never unlocked: the runtime ends this thread with the goroutine.
		runtime.LockOSThread()
		errc <- n.startIsolated(cmd)
	}()
	if err := <-errc; err != nil {
		return fmt.Errorf("starting %s in %s: %w", cmd.Path, n.name, err)
	}
	return nil
}

func (n *Namespace) startIsolated(cmd *exec.Cmd) error {
	if err := netns.Set(n.h); err != nil {
		return fmt.Errorf("entering namespace: %w", err)
	}
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("new mount namespace: %w", err)
	}
	// Nothing mounted here may reach the parent's namespace.
	if err := unix.Mount("", "/", "", unix.MS_SLAVE|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("making mounts private: %w", err)
	}
	// sysfs shows the network namespace of whoever mounts it.
	if err := unix.Unmount("/sys", unix.MNT_DETACH); err != nil && err != unix.EINVAL {
		return fmt.Errorf("unmounting /sys: %w", err)
	}
	if err := unix.Mount(n.name, "/sys", "sysfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mounting sysfs on /sys: %w", err)
	}
	return cmd.Start()
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
