package hostns

import (
	"fmt"
	"sort"

	"github.com/vishvananda/netlink"
)

// Snapshot is what a namespace's network looks like from netlink: one line
// per link, address and route, sorted. Tests take one of the root namespace
// before and after a lab and compare: a lab must leave it unchanged.
type Snapshot struct {
	Links  []string
	Addrs  []string
	Routes []string
}

// TakeSnapshot lists the links, addresses and routes (all tables, both
// families) of the namespace the calling thread is in; with a non-nil
// Namespace, of that namespace.
func TakeSnapshot(n *Namespace) (Snapshot, error) {
	h := &netlink.Handle{}
	if n != nil {
		h = n.nl
	}
	var s Snapshot
	links, err := h.LinkList()
	if err != nil {
		return s, fmt.Errorf("listing links: %w", err)
	}
	names := map[int]string{}
	for _, l := range links {
		a := l.Attrs()
		names[a.Index] = a.Name
		s.Links = append(s.Links, fmt.Sprintf("%s type=%s mtu=%d flags=%v master=%d", a.Name, l.Type(), a.MTU, a.Flags, a.MasterIndex))
		addrs, err := h.AddrList(l, netlink.FAMILY_ALL)
		if err != nil {
			return s, fmt.Errorf("listing addresses of %s: %w", a.Name, err)
		}
		for _, ad := range addrs {
			s.Addrs = append(s.Addrs, fmt.Sprintf("%s %s", a.Name, ad.IPNet))
		}
	}
	routes, err := h.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: 0}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return s, fmt.Errorf("listing routes: %w", err)
	}
	for _, r := range routes {
		s.Routes = append(s.Routes, fmt.Sprintf("table=%d dst=%v gw=%v dev=%s src=%v scope=%v proto=%v type=%d",
			r.Table, r.Dst, r.Gw, names[r.LinkIndex], r.Src, r.Scope, r.Protocol, r.Type))
	}
	sort.Strings(s.Links)
	sort.Strings(s.Addrs)
	sort.Strings(s.Routes)
	return s, nil
}
