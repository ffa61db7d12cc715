package prototrace

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/header"
	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport/metaroce/wire"
)

// FabricEvents selects which fabric events a Log's fabric observer writes.
type FabricEvents uint8

// Fabric events for the trace. Drops are what explain a transport's loss
// reactions; marks and corruptions are optional because they are many.
const (
	TraceDrops FabricEvents = 1 << iota
	TraceMarks
	TraceCorrupt
)

// ErrBadFabricEvents is wrapped by ParseFabricEvents' errors.
var ErrBadFabricEvents = errors.New("bad fabric events")

// ParseFabricEvents parses a comma-separated list of fabric events for
// the trace (--trace-fabric, GET /trace?fabric=): drops, marks, corrupt or
// none.
func ParseFabricEvents(s string) (FabricEvents, error) {
	var events FabricEvents
	for _, e := range strings.Split(s, ",") {
		switch strings.TrimSpace(e) {
		case "", "none":
		case "drops":
			events |= TraceDrops
		case "marks":
			events |= TraceMarks
		case "corrupt":
			events |= TraceCorrupt
		default:
			return 0, fmt.Errorf("%w: %q: want none, drops, marks or corrupt", ErrBadFabricEvents, e)
		}
	}
	return events, nil
}

// Fabric returns a fabric.Observer that writes the fabric's drops (and,
// as selected, CE marks and corruptions) into the trace, so that the
// transport's reaction follows its cause in one timeline:
//
//	t=130.2us fabric: drop (queue-full) at p0-leaf0-spine1:AtoB h0->h1 conn 1 path 2 psn 1834 WRITE
//	t=131.9us h0->h1 conn 1 path 2: SACK hole psn 1834, retransmit
//
// MetaRoCE packets are described by their common header; other packets by
// their UDP ports. names maps addresses to host names (nil: addresses).
// The host, connection and path filters apply (connection = destination
// connection id), as do the text filters.
func (l *Log) Fabric(n *fabric.Network, names func(netip.Addr) string, events FabricEvents) fabric.Observer {
	if events == 0 {
		events = TraceDrops
	}
	return &fabricTracer{l: l, n: n, names: names, events: events}
}

var _ fabric.Observer = (*fabricTracer)(nil)

type fabricTracer struct {
	l      *Log
	n      *fabric.Network
	names  func(netip.Addr) string
	events FabricEvents
}

func (f *fabricTracer) Observe(now sim.Time, ev fabric.Event, pt fabric.Point, p *packet.Buffer, reason fabric.DropReason) {
	switch {
	case ev == fabric.EvDrop && f.events&TraceDrops != 0:
	case ev == fabric.EvMark && f.events&TraceMarks != 0:
	case ev == fabric.EvCorrupt && f.events&TraceCorrupt != 0:
	default:
		return
	}
	d := p.Data()
	if len(d) < header.IPv4MinSize || d[0]>>4 != 4 {
		f.write(now, ev, pt, reason, []byte("non-IPv4 packet"), "", "", 0, false)
		return
	}
	ip := header.IPv4(d)
	src, dst := f.name(ip.Src()), f.name(ip.Dst())
	if fl := &f.l.filter; len(fl.Hosts) > 0 && !slices.Contains(fl.Hosts, src) && !slices.Contains(fl.Hosts, dst) {
		return
	}
	hl := ip.HeaderLength()
	var desc []byte
	path, conn, hasConn := -1, uint32(0), false
	if ip.Protocol() == header.IPv4ProtoUDP && hl >= header.IPv4MinSize && len(d) >= hl+header.UDPSize {
		u := header.UDP(d[hl:])
		pl := d[hl+header.UDPSize:]
		if u.DstPort() == wire.UDPPort && len(pl) >= wire.CommonSize {
			h := wire.Header(pl)
			conn, hasConn, path = h.DstConn(), true, int(h.Path())
			b := append(f.l.msg[:0], "path "...)
			b = strconv.AppendInt(b, int64(h.Path()), 10)
			if h.Type() != wire.TypeAck {
				b = append(b, " psn "...)
			} else {
				b = append(b, " cack "...)
			}
			b = strconv.AppendUint(b, uint64(h.PSN()), 10)
			b = append(b, ' ')
			b = append(b, h.Type().String()...)
			if h.Flags()&wire.FlagRetx != 0 {
				b = append(b, " RETX"...)
			}
			f.l.msg = b
			desc = b
		} else {
			b := append(f.l.msg[:0], "udp "...)
			b = strconv.AppendUint(b, uint64(u.SrcPort()), 10)
			b = append(b, "->"...)
			b = strconv.AppendUint(b, uint64(u.DstPort()), 10)
			f.l.msg = b
			desc = b
		}
	} else {
		b := append(f.l.msg[:0], "proto "...)
		b = strconv.AppendUint(b, uint64(ip.Protocol()), 10)
		f.l.msg = b
		desc = b
	}
	fl := &f.l.filter
	if len(fl.Conns) > 0 && (!hasConn || !slices.Contains(fl.Conns, conn)) {
		return
	}
	if len(fl.Paths) > 0 && !slices.Contains(fl.Paths, path) {
		return
	}
	f.write(now, ev, pt, reason, desc, src, dst, conn, hasConn)
}

func (f *fabricTracer) name(a netip.Addr) string {
	if f.names != nil {
		if s := f.names(a); s != "" {
			return s
		}
	}
	return a.String()
}

func (f *fabricTracer) write(now sim.Time, ev fabric.Event, pt fabric.Point, reason fabric.DropReason, desc []byte, src, dst string, conn uint32, hasConn bool) {
	l := f.l
	b := append(l.buf[:0], "t="...)
	b = appendTime(b, now)
	b = append(b, " fabric: "...)
	b = append(b, ev.String()...)
	if ev == fabric.EvDrop {
		b = append(b, " ("...)
		b = append(b, reason.String()...)
		b = append(b, ')')
	}
	b = append(b, " at "...)
	b = append(b, f.n.PointName(pt)...)
	if src != "" {
		b = append(b, ' ')
		b = append(b, src...)
		b = append(b, "->"...)
		b = append(b, dst...)
	}
	if hasConn {
		b = append(b, " conn "...)
		b = strconv.AppendUint(b, uint64(conn), 10)
	}
	b = append(b, ' ')
	b = append(b, desc...)
	l.emit(b)
}
