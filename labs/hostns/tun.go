package hostns

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"

	"github.com/songgao/water"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// TUN is a TUN device (IFF_TUN|IFF_NO_PI) opened inside a namespace: the
// host's NIC netdev. Each Read returns one IPv4 packet the host's kernel
// sent; each Write hands one packet to the host's kernel. Its file descriptor
// is non-blocking and polled by the Go runtime, so Close unblocks a pending
// Read (with os.ErrClosed). Reads and writes may come from different
// goroutines; one reader and one writer at a time.
type TUN struct {
	ifce *water.Interface
	name string
	ns   string
	mtu  int
}

// Name returns the interface name inside the namespace.
func (t *TUN) Name() string { return t.name }

// Namespace returns the name of the namespace the device lives in.
func (t *TUN) Namespace() string { return t.ns }

// MTU returns the MTU the device was configured with (0 before Configure).
func (t *TUN) MTU() int { return t.mtu }

// Read reads one packet into b.
func (t *TUN) Read(b []byte) (int, error) { return t.ifce.Read(b) }

// Write writes one packet.
func (t *TUN) Write(b []byte) (int, error) { return t.ifce.Write(b) }

// Close closes the device; the interface disappears with it (it is not
// persistent).
func (t *TUN) Close() error {
	err := t.ifce.Close()
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
	var ifce *water.Interface
	err := n.Do(func() error {
		var err error
		ifce, err = water.New(water.Config{
			DeviceType:             water.TUN,
			PlatformSpecificParams: water.PlatformSpecificParams{Name: ifname},
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("opening TUN %s in %s: %w", ifname, n.name, err)
	}
	return &TUN{ifce: ifce, name: ifce.Name(), ns: n.name}, nil
}

// IfConfig is a host interface's addressing: its address with the prefix
// length of the on-link subnet, and the subnets routed through it.
type IfConfig struct {
	Addr   netip.Prefix   // e.g. 198.18.0.1/32
	Routes []netip.Prefix // e.g. 198.18.0.0/15; never a default route
	MTU    int
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
