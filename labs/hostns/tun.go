package hostns

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/tun"
)

// TUN is a TUN device opened inside a namespace: the host's NIC netdev.
// It is opened the way wireguard-go opens its own (IFF_TUN|IFF_NO_PI|
// IFF_VNET_HDR with TCP segmentation offload and, on Linux 6.2+, UDP's):
// the kernel hands it TCP super-packets of up to 64 KiB in one read, which
// Read splits into MTU-sized packets with their checksums filled in, and
// Write coalesces consecutive TCP segments of a flow into one write (GRO),
// so the host kernel handles far fewer packets and system calls than one
// per packet. The packets Read returns and Write takes are ordinary IPv4
// packets of at most the MTU.
//
// Its file descriptor is non-blocking and polled by the Go runtime, so
// Close unblocks a pending Read (with os.ErrClosed). One goroutine reads and
// another writes.
type TUN struct {
	dev  tun.Device
	name string
	ns   string
	mtu  int
	try  *tryReader // TryRead's, made on its first call
}

// Headroom is the room Write needs in front of each packet in its buffer
// (offset >= Headroom): the virtio-net header the kernel exchanges with
// the device goes there.
const Headroom = 16

// Name returns the interface name inside the namespace.
func (t *TUN) Name() string { return t.name }

// Namespace returns the name of the namespace the device lives in.
func (t *TUN) Namespace() string { return t.ns }

// MTU returns the MTU the device was configured with (0 before Configure).
func (t *TUN) MTU() int { return t.mtu }

// BatchSize is how many packets one Read may return and one Write should
// be given: len(bufs) and len(sizes) of a Read must be at least this.
func (t *TUN) BatchSize() int { return t.dev.BatchSize() }

// Read reads what the kernel sent, as up to len(bufs) packets, each into
// bufs[i][offset:], with its length in sizes[i]; it returns the count.
func (t *TUN) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	return t.dev.Read(bufs, sizes, offset)
}

// Write hands each bufs[i][offset:] to the kernel as one packet;
// offset must be at least Headroom, and bufs[i] may be extended up to its
// capacity by coalescing (a packet written as part of a larger one). It
// returns the number of bytes written and the errors of the packets the
// kernel refused.
func (t *TUN) Write(bufs [][]byte, offset int) (int, error) {
	if offset < Headroom {
		return 0, fmt.Errorf("writing to %s in %s: offset %d, want at least %d", t.name, t.ns, offset, Headroom)
	}
	return t.dev.Write(bufs, offset)
}

// Readable reports whether the kernel has a packet waiting, without
// blocking: a reader that got one batch can take what else is queued
// before handing it on.
func (t *TUN) Readable() (bool, error) {
	rc, err := t.dev.File().SyscallConn()
	if err != nil {
		return false, err
	}
	var n int
	var perr error
	err = rc.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, perr = unix.Poll(fds, 0)
	})
	if err != nil {
		return false, err
	}
	return n > 0, perr
}

// PollFD returns the device's descriptor for polling (it polls readable
// while a Read would find a packet at once), to watch from an epoll of
// the caller's own. It stays valid until Close; read and write through
// the TUN only.
func (t *TUN) PollFD() (int, error) {
	rc, err := t.dev.File().SyscallConn()
	if err != nil {
		return -1, fmt.Errorf("%s in %s: %w", t.name, t.ns, err)
	}
	fd := -1
	if err := rc.Control(func(f uintptr) { fd = int(f) }); err != nil {
		return -1, fmt.Errorf("%s in %s: %w", t.name, t.ns, err)
	}
	return fd, nil
}

// Close closes the device; the interface disappears with it (it is not
// persistent).
func (t *TUN) Close() error {
	err := t.dev.Close()
	if errors.Is(err, os.ErrClosed) {
		return nil
	}
	return err
}

// OpenTUN creates the TUN device ifname inside the namespace. The interface
// exists as long as the returned TUN is open.
func (n *Namespace) OpenTUN(ifname string) (*TUN, error) {
	if len(ifname) == 0 || len(ifname) > unix.IFNAMSIZ-1 {
		return nil, fmt.Errorf("opening TUN in %s: interface name %q: want 1..%d characters", n.name, ifname, unix.IFNAMSIZ-1)
	}
	var dev tun.Device
	var name string
	err := n.Do(func() error {
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		ifr, err := unix.NewIfreq(ifname)
		if err != nil {
			unix.Close(fd)
			return err
		}
		ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI | unix.IFF_VNET_HDR)
		if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
			unix.Close(fd)
			return fmt.Errorf("TUNSETIFF: %w", err)
		}
		// It sets the offloads IFF_VNET_HDR allows and takes the fd.
		dev, name, err = tun.CreateUnmonitoredTUNFromFD(fd)
		if err != nil {
			unix.Close(fd)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("opening TUN %s in %s: %w", ifname, n.name, err)
	}
	return &TUN{dev: dev, name: name, ns: n.name}, nil
}

// IfConfig is a host interface's addressing: its address with the prefix
// length of the on-link subnet, and the subnets routed through it.
type IfConfig struct {
	Addr   netip.Prefix   // e.g. 198.18.0.1/32
	Routes []netip.Prefix // e.g. 198.18.0.0/15; never a default route
	MTU    int
	// TxQueueLen, if set, is the interface's transmit queue length: for a
	// TUN, how many packets the kernel holds for the reader before it
	// drops (counted as the interface's tx_dropped).
	TxQueueLen int
}

// Shape paces an interface's egress as a NIC's line paces a real host's
// (Namespace.Shape): a token bucket (Linux's tbf qdisc) that hands the
// device at most Rate, up to Burst bytes at once, and holds what the host
// sends faster, up to Limit bytes. A packet held in a qdisc is still
// charged to its socket's send buffer, so a sender faster than the line
// blocks once that buffer is full, as at a real NIC; a TUN device frees
// (orphans) each packet as it queues it for its reader, and without a
// shaper a host that sends faster than its reader reads loses the excess
// at the device's ring (tx_dropped) however deep the ring.
type Shape struct {
	Rate  float64 // bits per second
	Burst int     // bytes; at least the largest packet (a 64 KiB super-packet), or the qdisc splits it
	Limit int     // bytes held before the qdisc drops (counted: IfCounters.QdiscDropped)
}

// Shape installs s as the root qdisc of t's interface.
func (n *Namespace) Shape(t *TUN, s Shape) error {
	if s.Rate <= 0 || s.Burst <= 0 || s.Limit <= 0 {
		return fmt.Errorf("shaping %s in %s: rate %v bit/s, burst %d B, limit %d B: want all positive", t.name, n.name, s.Rate, s.Burst, s.Limit)
	}
	link, err := n.nl.LinkByName(t.name)
	if err != nil {
		return fmt.Errorf("shaping %s in %s: %w", t.name, n.name, err)
	}
	rate := uint64(s.Rate / 8) // bytes per second
	// The kernel's fields are 32-bit: a queue past 4 GiB (20 ms at 1.6
	// Tbit/s) is clamped, not wrapped.
	q := &netlink.Tbf{
		QdiscAttrs: netlink.QdiscAttrs{LinkIndex: link.Attrs().Index, Handle: netlink.MakeHandle(1, 0), Parent: netlink.HANDLE_ROOT},
		Rate:       rate,
		Limit:      uint32(min(s.Limit, math.MaxUint32)),
		Buffer:     netlink.Xmittime(rate, uint32(min(s.Burst, math.MaxUint32))),
	}
	if err := n.nl.QdiscReplace(q); err != nil {
		return fmt.Errorf("shaping %s in %s to %v bit/s (tbf): %w", t.name, n.name, s.Rate, err)
	}
	return nil
}

// Configure brings lo up, sets the MTU, address and routes of the TUN and
// brings it up. It refuses a default route: a lab host reaches only the lab.
func (n *Namespace) Configure(t *TUN, c IfConfig) error {
	if !c.Addr.IsValid() || !c.Addr.Addr().Is4() {
		return fmt.Errorf("configuring %s in %s: address %v: want an IPv4 prefix", t.name, n.name, c.Addr)
	}
	lo, err := n.nl.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("configuring lo in %s: %w", n.name, err)
	}
	if err := n.nl.LinkSetUp(lo); err != nil {
		return fmt.Errorf("bringing lo up in %s: %w", n.name, err)
	}
	link, err := n.nl.LinkByName(t.name)
	if err != nil {
		return fmt.Errorf("configuring %s in %s: %w", t.name, n.name, err)
	}
	if c.MTU > 0 {
		if err := n.nl.LinkSetMTU(link, c.MTU); err != nil {
			return fmt.Errorf("setting MTU %d on %s in %s: %w", c.MTU, t.name, n.name, err)
		}
		t.mtu = c.MTU
	}
	if c.TxQueueLen > 0 {
		if err := n.nl.LinkSetTxQLen(link, c.TxQueueLen); err != nil {
			return fmt.Errorf("setting txqueuelen %d on %s in %s: %w", c.TxQueueLen, t.name, n.name, err)
		}
	}
	addr := &netlink.Addr{IPNet: prefixNet(c.Addr)}
	if err := n.nl.AddrAdd(link, addr); err != nil {
		return fmt.Errorf("adding %v to %s in %s: %w", c.Addr, t.name, n.name, err)
	}
	if err := n.nl.LinkSetUp(link); err != nil {
		return fmt.Errorf("bringing %s up in %s: %w", t.name, n.name, err)
	}
	for _, r := range c.Routes {
		if r.Bits() == 0 {
			return fmt.Errorf("route %v via %s in %s: a lab host gets no default route", r, t.name, n.name)
		}
		rt := &netlink.Route{LinkIndex: link.Attrs().Index, Dst: prefixNet(r.Masked()), Scope: netlink.SCOPE_LINK}
		if err := n.nl.RouteReplace(rt); err != nil {
			return fmt.Errorf("adding route %v via %s in %s: %w", r, t.name, n.name, err)
		}
	}
	return nil
}

// DisableIPv6 turns IPv6 off in the namespace, so a lab's captures hold
// only what the lab sent (no router solicitations, no link-local chatter).
// The write happens from a thread inside the namespace: /proc/sys/net shows
// the namespace of the thread that opens it.
func (n *Namespace) DisableIPv6() error {
	return n.Do(func() error {
		for _, p := range []string{"/proc/sys/net/ipv6/conf/all/disable_ipv6", "/proc/sys/net/ipv6/conf/default/disable_ipv6"} {
			if err := os.WriteFile(p, []byte("1\n"), 0); err != nil {
				if errors.Is(err, os.ErrNotExist) {
					return nil // kernel without IPv6
				}
				return fmt.Errorf("disabling IPv6 in %s: %w", n.name, err)
			}
		}
		return nil
	})
}

// prefixNet converts a netip.Prefix to the *net.IPNet netlink wants.
func prefixNet(p netip.Prefix) *net.IPNet {
	a := p.Addr()
	bits := 32
	if a.Is6() {
		bits = 128
	}
	return &net.IPNet{IP: net.IP(a.AsSlice()), Mask: net.CIDRMask(p.Bits(), bits)}
}

// IfCounters are the kernel's counters of an interface (ip -s link): for
// a host's mr0, tx is what the host sent towards the lab and rx what it
// received from it.
type IfCounters struct {
	RxPackets uint64 `json:"rx_packets"`
	RxBytes   uint64 `json:"rx_bytes"`
	RxDropped uint64 `json:"rx_dropped"`
	RxErrors  uint64 `json:"rx_errors"`
	TxPackets uint64 `json:"tx_packets"`
	TxBytes   uint64 `json:"tx_bytes"`
	TxDropped uint64 `json:"tx_dropped"`
	TxErrors  uint64 `json:"tx_errors"`
	// QdiscDropped counts packets the interface's root qdisc dropped (a
	// shaper's queue full: the host sent faster than its line for longer
	// than the queue holds).
	QdiscDropped uint64 `json:"qdisc_dropped"`
}

// Counters reads the kernel's counters of interface ifname in the
// namespace. Safe from any goroutine.
func (n *Namespace) Counters(ifname string) (IfCounters, error) {
	n.statsMu.Lock()
	link, err := n.nl.LinkByName(ifname)
	n.statsMu.Unlock()
	if err != nil {
		return IfCounters{}, fmt.Errorf("reading %s's counters in %s: %w", ifname, n.name, err)
	}
	st := link.Attrs().Statistics
	if st == nil {
		return IfCounters{}, fmt.Errorf("reading %s's counters in %s: netlink returned none", ifname, n.name)
	}
	c := IfCounters{
		RxPackets: st.RxPackets, RxBytes: st.RxBytes, RxDropped: st.RxDropped, RxErrors: st.RxErrors,
		TxPackets: st.TxPackets, TxBytes: st.TxBytes, TxDropped: st.TxDropped, TxErrors: st.TxErrors,
	}
	n.statsMu.Lock()
	qs, err := n.nl.QdiscList(link)
	n.statsMu.Unlock()
	if err != nil {
		return IfCounters{}, fmt.Errorf("reading %s's qdisc counters in %s: %w", ifname, n.name, err)
	}
	for _, q := range qs {
		if a := q.Attrs(); a.Parent == netlink.HANDLE_ROOT && a.Statistics != nil && a.Statistics.Queue != nil {
			c.QdiscDropped = uint64(a.Statistics.Queue.Drops)
		}
	}
	return c, nil
}

// DetachRuntimePoller takes t's descriptor out of the Go runtime's
// network poller (its epoll, found by the edge-triggered registration
// it made of this descriptor, in /proc/self/fdinfo), for a device read
// only when a poll of the caller's own says it is readable (a Read that
// would block would then never return, until Close). Registered, every
// packet the host's kernel queues on the device, and every packet
// written to the device and freed, wakes an idle runtime thread blocked
// in that epoll, which finds no goroutine waiting on the device and
// sleeps again: a thread wake-up per packet. Writes are unaffected (a
// TUN's send buffer is unlimited, so a write never waits for room).
func (t *TUN) DetachRuntimePoller() error {
	fd, err := t.PollFD()
	if err != nil {
		return err
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return fmt.Errorf("detaching %s in %s from the runtime's poller: %w", t.name, t.ns, err)
	}
	want := fmt.Sprintf("tfd: %8d events: ", fd)
	for _, e := range ents {
		link, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil || link != "anon_inode:[eventpoll]" {
			continue
		}
		info, err := os.ReadFile("/proc/self/fdinfo/" + e.Name())
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(info), "\n") {
			rest, ok := strings.CutPrefix(l, want)
			if !ok || len(rest) < 8 {
				continue
			}
			ev, err := strconv.ParseUint(rest[:8], 16, 32)
			if err != nil || ev&unix.EPOLLET == 0 {
				continue // a level-triggered watch: the caller's own
			}
			ep, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			if err := unix.EpollCtl(ep, unix.EPOLL_CTL_DEL, fd, nil); err != nil {
				return fmt.Errorf("detaching %s in %s from the runtime's poller: %w", t.name, t.ns, err)
			}
			return nil
		}
	}
	return fmt.Errorf("detaching %s in %s from the runtime's poller: no epoll watches descriptor %d edge-triggered", t.name, t.ns, fd)
}
