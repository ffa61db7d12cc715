// Package hostns is the operating-system plumbing of a live lab: named network
// namespaces, the TUN device that is a host's NIC netdev, its addresses and
// routes, and running programs inside a namespace.
//
// Everything here acts on namespaces the caller names; nothing adds an
// address, route or link to the namespace the process started in. Functions
// that must run inside a namespace (creating one, opening a TUN, writing
// /proc/sys/net) do so on a locked OS thread and switch it back before
// unlocking; if switching back fails the thread stays locked and the Go
// runtime discards it when the goroutine ends, so no other goroutine ever runs
// in the wrong namespace.
package hostns

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sync"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// NetnsDir is where named namespaces are bind-mounted, as by `ip netns add`.
const NetnsDir = "/run/netns"

// ErrExists is returned by Create when a namespace of that name exists.
var ErrExists = errors.New("network namespace exists")

// Namespace is an open named network namespace. It holds a file descriptor
// for the namespace and a netlink handle bound to it; Close releases both
// (the namespace itself lives on until Delete).
type Namespace struct {
	name    string
	h       netns.NsHandle
	nl      *netlink.Handle
	statsMu sync.Mutex // serialises Counters, which may run on any goroutine
}

// Name returns the namespace's name (its file under NetnsDir).
func (n *Namespace) Name() string { return n.name }

// Netlink returns a netlink handle that acts inside the namespace.
func (n *Namespace) Netlink() *netlink.Handle { return n.nl }

// Close releases the namespace's descriptors. It does not delete it.
func (n *Namespace) Close() error {
	if n.nl != nil {
		n.nl.Close()
		n.nl = nil
	}
	if n.h.IsOpen() {
		return n.h.Close()
	}
	return nil
}

// ValidName reports whether name is usable as a namespace name: a file name
// under NetnsDir.
func ValidName(name string) error {
	if name == "" || name == "." || name == ".." || len(name) > 255 {
		return fmt.Errorf("bad namespace name %q", name)
	}
	for _, c := range name {
		ok := c == '-' || c == '_' || c == '.' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
		if !ok {
			return fmt.Errorf("bad namespace name %q: character %q (want letters, digits, '-', '_', '.')", name, c)
		}
	}
	return nil
}

// Exists reports whether a namespace of that name exists.
func Exists(name string) bool {
	if ValidName(name) != nil {
		return false
	}
	_, err := os.Lstat(filepath.Join(NetnsDir, name))
	return err == nil
}

// Create makes a new named network namespace and opens it. It fails with
// ErrExists if the name is taken: a lab never adopts a namespace it did not
// create. The calling goroutine's namespace is unchanged.
//
// It works as `ip netns add` does, so that both tools can share NetnsDir in
// any order: NetnsDir is first made a shared mount point of its own (bound
// over itself once if it is a plain directory), then the namespace is
// bind-mounted on a file created there exclusively. Without the first step
// a later `ip netns add` binds NetnsDir over itself and hides this
// namespace's mount, which can then neither be unmounted nor removed.
func Create(name string) (*Namespace, error) {
	if err := ValidName(name); err != nil {
		return nil, err
	}
	if err := prepareDir(); err != nil {
		return nil, fmt.Errorf("creating namespace %s: %w", name, err)
	}
	p := filepath.Join(NetnsDir, name)
	f, err := os.OpenFile(p, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("creating namespace %s: %w", name, ErrExists)
	}
	if err != nil {
		return nil, fmt.Errorf("creating namespace %s: %w", name, err)
	}
	f.Close()
	h, err := onThread(func() (netns.NsHandle, error) {
		h, err := netns.New() // unshares this (locked) thread's network namespace
		if err != nil {
			return h, err
		}
		self := fmt.Sprintf("/proc/%d/task/%d/ns/net", os.Getpid(), unix.Gettid())
		if err := unix.Mount(self, p, "none", unix.MS_BIND, ""); err != nil {
			h.Close()
			return netns.None(), fmt.Errorf("bind-mounting it on %s: %w", p, err)
		}
		return h, nil
	})
	if err != nil {
		os.Remove(p)
		return nil, fmt.Errorf("creating namespace %s: %w", name, err)
	}
	n := &Namespace{name: name, h: h}
	if n.nl, err = netlink.NewHandleAt(h); err != nil {
		n.Close()
		return nil, fmt.Errorf("netlink handle in namespace %s: %w", name, err)
	}
	return n, nil
}

// prepareMu serialises prepareDir within the process.
var prepareMu sync.Mutex

// prepareDir makes NetnsDir exist and be a shared mount point of its own,
// with iproute2's algorithm (ip/ipnetns.c netns_add): try to make it
// shared; if that fails with EINVAL it is not a mount point yet, so bind it
// over itself (recursively, keeping the namespaces already mounted there
// visible) and try again.
func prepareDir() error {
	prepareMu.Lock()
	defer prepareMu.Unlock()
	if err := os.MkdirAll(NetnsDir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", NetnsDir, err)
	}
	for bound := false; ; bound = true {
		err := unix.Mount("", NetnsDir, "none", unix.MS_SHARED|unix.MS_REC, "")
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.EINVAL) || bound {
			return fmt.Errorf("making %s a shared mount point: %w", NetnsDir, err)
		}
		if err := unix.Mount(NetnsDir, NetnsDir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("binding %s over itself: %w", NetnsDir, err)
		}
	}
}

// Open opens an existing named namespace.
func Open(name string) (*Namespace, error) {
	if err := ValidName(name); err != nil {
		return nil, err
	}
	h, err := netns.GetFromName(name)
	if err != nil {
		return nil, fmt.Errorf("opening namespace %s: %w", name, err)
	}
	n := &Namespace{name: name, h: h}
	if n.nl, err = netlink.NewHandleAt(h); err != nil {
		n.Close()
		return nil, fmt.Errorf("netlink handle in namespace %s: %w", name, err)
	}
	return n, nil
}

// Delete removes a named namespace: it unmounts and removes its file under
// NetnsDir. Interfaces inside it (a TUN) vanish with the namespace once no
// process holds it. Deleting a namespace that does not exist is not an error,
// so teardown can be repeated.
func Delete(name string) error {
	if err := ValidName(name); err != nil {
		return err
	}
	p := filepath.Join(NetnsDir, name)
	if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	// EINVAL: nothing is mounted on the file (a crash between creating the
	// file and mounting); still remove the file.
	if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("deleting namespace %s: unmount: %w", name, err)
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		if errors.Is(err, unix.EBUSY) {
			// The file is a mount point in a mount of NetnsDir that another
			// mount now covers: NetnsDir was bound over itself after this
			// namespace was created, by a tool that did not find it a mount
			// point (Create makes it one, as iproute2 does, so this only
			// happens to namespaces created without doing so).
			return fmt.Errorf("deleting namespace %s: %w (its mount is hidden under a later mount of %s over itself; see /proc/self/mountinfo)", name, err, NetnsDir)
		}
		return fmt.Errorf("deleting namespace %s: %w", name, err)
	}
	return nil
}

// Do runs fn on a locked OS thread inside the namespace and switches the
// thread back afterwards.
func (n *Namespace) Do(fn func() error) error {
	_, err := onThreadIn(n.h, func() (struct{}, error) { return struct{}{}, fn() })
	return err
}

// onThread runs fn on a locked OS thread and restores the thread's network
// namespace afterwards (fn may switch it, as netns.NewNamed does).
func onThread[T any](fn func() (T, error)) (T, error) {
	return onThreadIn(netns.None(), fn)
}

// onThreadIn runs fn on a locked OS thread switched into ns (or left where it
// is when ns is None) and restores the original namespace. If restoring fails
// the thread is left locked so the runtime retires it with the goroutine.
func onThreadIn[T any](ns netns.NsHandle, fn func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		var zero T
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{zero, fmt.Errorf("getting current namespace: %w", err)}
			return
		}
		defer orig.Close()
		if ns.IsOpen() {
			if err := netns.Set(ns); err != nil {
				runtime.UnlockOSThread()
				ch <- result{zero, fmt.Errorf("entering namespace: %w", err)}
				return
			}
		}
		v, err := fn()
		if rerr := netns.Set(orig); rerr != nil {
			// Stay locked: the thread dies with this goroutine.
			ch <- result{v, errors.Join(err, fmt.Errorf("restoring namespace: %w", rerr))}
			return
		}
		runtime.UnlockOSThread()
		ch <- result{v, err}
	}()
	r := <-ch
	return r.v, r.err
}
