package capture

import (
	"bytes"
	"errors"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
)

// line is h0 -- leaf0 -- h1: directions 0 (h0->leaf0), 1, 2 (leaf0->h1), 3.
func line() *fabric.Topology {
	return &fabric.Topology{
		Name:     "line",
		Hosts:    []fabric.Host{{Name: "h0", Addr: netip.MustParseAddr("198.18.0.1"), Ports: 1}, {Name: "h1", Addr: netip.MustParseAddr("198.18.0.2"), Ports: 1}},
		Switches: []fabric.Switch{{Name: "leaf0", Role: "leaf"}},
		Links: []fabric.Link{
			{Name: "h0-leaf0", A: fabric.Endpoint{Node: "h0", Port: 0}, B: fabric.Endpoint{Node: "leaf0", Port: 0}},
			{Name: "leaf0-h1", A: fabric.Endpoint{Node: "leaf0", Port: 1}, B: fabric.Endpoint{Node: "h1", Port: 0}},
		},
	}
}

type closeBuffer struct {
	bytes.Buffer
	closed bool
}

func (c *closeBuffer) Close() error { c.closed = true; return nil }

type event struct {
	t      sim.Time
	ev     fabric.Event
	link   int
	node   string
	pkt    int
	reason fabric.DropReason
}

// feed plays a scripted event sequence into an observer, with packets from
// a pool so ids are what the fabric would give.
func feed(o fabric.Observer, pkts []*packet.Buffer, evs []event) {
	for _, e := range evs {
		pt := fabric.Point{Link: e.link, Node: e.node}
		if e.node != "" {
			pt.Link = -1
		}
		o.Observe(e.t, e.ev, pt, pkts[e.pkt], e.reason)
	}
}

func packets(pool *packet.Pool, n int) []*packet.Buffer {
	var out []*packet.Buffer
	for i := 0; i < n; i++ {
		b := pool.Get(100)
		d := udpPacket("198.18.0.1", "198.18.0.2", uint16(49152+i), 53791, []byte{byte(i)})
		b.SetLen(copy(b.Tail(), d))
		out = append(out, b)
	}
	return out
}

type got struct {
	Iface   string
	Time    sim.Time
	ID      uint64
	Flags   uint32
	Comment string
}

func readBack(t *testing.T, b []byte) []got {
	t.Helper()
	r, pkts, err := ReadAll(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	var out []got
	for _, p := range pkts {
		out = append(out, got{r.Interfaces()[p.Iface].Name, p.Time, p.PacketID, p.Flags, p.Comment})
	}
	return out
}

func TestCaptureAnnotations(t *testing.T) {
	pool := packet.NewPoolIDs(1000) // fabric IDs 1001..: not the capture's numbers
	pk := packets(pool, 5)
	// The capture numbers packets in the order it first records them, the
	// same at every point: 0 (100 ns), 1 (110 ns), 3 (130 ns), 2 (220 ns), 4.
	id := func(i int) uint64 { return map[int]uint64{0: 1, 1: 2, 3: 3, 2: 4, 4: 5}[i] }
	// Packet 0 crosses both links, CE marked on the first; packet 1 is
	// dropped at h0's queue; packet 2 is dropped by leaf0 (no route);
	// packet 3 is corrupted on the second link; packet 4 is lost in flight
	// when the first link goes down.
	evs := []event{
		{t: 100, ev: fabric.EvEnqueue, link: 0, pkt: 0},
		{t: 100, ev: fabric.EvMark, link: 0, pkt: 0},
		{t: 100, ev: fabric.EvTransmit, link: 0, pkt: 0},
		{t: 110, ev: fabric.EvDrop, link: 0, pkt: 1, reason: fabric.DropQueueFull},
		{t: 120, ev: fabric.EvEnqueue, link: 0, pkt: 2},
		{t: 130, ev: fabric.EvEnqueue, link: 2, pkt: 3},
		{t: 130, ev: fabric.EvTransmit, link: 2, pkt: 3},
		{t: 135, ev: fabric.EvCorrupt, link: 2, pkt: 3},
		{t: 200, ev: fabric.EvDeliver, link: 0, pkt: 0},
		{t: 210, ev: fabric.EvEnqueue, link: 2, pkt: 0},
		{t: 210, ev: fabric.EvTransmit, link: 2, pkt: 0},
		{t: 220, ev: fabric.EvTransmit, link: 0, pkt: 2},
		{t: 230, ev: fabric.EvDeliver, link: 2, pkt: 3},
		{t: 300, ev: fabric.EvDeliver, link: 2, pkt: 0},
		{t: 320, ev: fabric.EvDeliver, link: 0, pkt: 2},
		{t: 320, ev: fabric.EvDrop, node: "leaf0", pkt: 2, reason: fabric.DropNoRoute},
		{t: 400, ev: fabric.EvEnqueue, link: 0, pkt: 4},
		{t: 400, ev: fabric.EvTransmit, link: 0, pkt: 4},
		{t: 450, ev: fabric.EvDrop, link: 0, pkt: 4, reason: fabric.DropLinkDown},
	}
	c := newCapture(LayoutOf(line()))
	outs := map[string]*closeBuffer{}
	for _, s := range []string{"h0", "leaf0", "leaf0-h1", "h1:0", "h0-leaf0:BtoA"} {
		sp, err := ParseSpec(s)
		if err != nil {
			t.Fatal(err)
		}
		outs[s] = &closeBuffer{}
		if _, err := c.add(sp, outs[s], nil); err != nil {
			t.Fatal(err)
		}
	}
	feed(c, pk, evs)
	if err := c.Close(400); err != nil {
		t.Fatal(err)
	}
	mark0 := "CE marked at h0-leaf0 (a->b)"
	want := map[string][]got{
		"h0": {
			{"h0:0 tx", 100, id(0), DirOutbound, mark0},
			{"h0:0 tx", 110, id(1), DirOutbound, "dropped: queue full at h0-leaf0 (a->b)"},
			{"h0:0 tx", 220, id(2), DirOutbound, ""},
			{"h0:0 tx", 400, id(4), DirOutbound, ""},
		},
		"leaf0": {
			{"leaf0:0 rx", 110, id(1), DirInbound, "dropped: queue full at h0-leaf0 (a->b)"},
			{"leaf0:1 tx", 130, id(3), DirOutbound, ""},
			{"leaf0:0 rx", 200, id(0), DirInbound, mark0},
			{"leaf0:1 tx", 210, id(0), DirOutbound, ""},
			{"leaf0:0 rx", 320, id(2), DirInbound, ""},
			{"leaf0", 320, id(2), 0, "dropped: no route at leaf0"},
			{"leaf0:0 rx", 450, id(4), DirInbound, "dropped: link down at h0-leaf0 (a->b)"},
		},
		"leaf0-h1": {
			{"leaf0-h1:AtoB", 230, id(3), 0, "corrupted at leaf0-h1 (a->b)"},
			{"leaf0-h1:AtoB", 300, id(0), 0, ""},
		},
		"h1:0": {
			{"h1:0 rx", 230, id(3), DirInbound, "corrupted at leaf0-h1 (a->b)"},
			{"h1:0 rx", 300, id(0), DirInbound, ""},
		},
		"h0-leaf0:BtoA": nil,
	}
	for name, w := range want {
		if !outs[name].closed {
			t.Errorf("%s: writer not closed", name)
		}
		if d := cmp.Diff(w, readBack(t, outs[name].Bytes())); d != "" {
			t.Errorf("capture %s (-want +got):\n%s", name, d)
		}
	}
	if len(c.pending) != 0 {
		t.Errorf("pending annotations left after every packet was delivered or dropped: %v", c.pending)
	}
}

func TestCaptureInterfaces(t *testing.T) {
	c := newCapture(LayoutOf(line()))
	var buf closeBuffer
	sp, _ := ParseSpec("leaf0")
	if _, err := c.add(sp, &buf, nil); err != nil {
		t.Fatal(err)
	}
	c.Close(0)
	r, _, err := ReadAll(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	want := []ReadInterface{
		{LinkType: LinkTypeIPv4, Name: "leaf0:0 tx", Description: "leaf0:0 -> h0:0, link h0-leaf0 (b->a)", TsResol: 9},
		{LinkType: LinkTypeIPv4, Name: "leaf0:0 rx", Description: "leaf0:0 <- h0:0, link h0-leaf0 (a->b)", TsResol: 9},
		{LinkType: LinkTypeIPv4, Name: "leaf0:1 tx", Description: "leaf0:1 -> h1:0, link leaf0-h1 (a->b)", TsResol: 9},
		{LinkType: LinkTypeIPv4, Name: "leaf0:1 rx", Description: "leaf0:1 <- h1:0, link leaf0-h1 (b->a)", TsResol: 9},
		{LinkType: LinkTypeIPv4, Name: "leaf0", Description: "drops and events at node leaf0 itself", TsResol: 9},
	}
	if d := cmp.Diff(want, r.Interfaces()); d != "" {
		t.Errorf("interfaces (-want +got):\n%s", d)
	}
}

type onlySport uint16

func (s onlySport) Match(ip []byte) bool { return uint16(ip[20])<<8|uint16(ip[21]) == uint16(s) }

func TestCaptureMatcherAndRemove(t *testing.T) {
	pool := packet.NewPool()
	pk := packets(pool, 3)
	c := newCapture(LayoutOf(line()))
	var all, one closeBuffer
	sp, _ := ParseSpec("h0-leaf0:ab")
	sAll, _ := c.add(sp, &all, nil)
	sOne, _ := c.add(sp, &one, onlySport(49153))
	feed(c, pk, []event{{t: 1, ev: fabric.EvDeliver, link: 0, pkt: 0}, {t: 2, ev: fabric.EvDeliver, link: 0, pkt: 1}})
	if err := c.remove(sOne, 3); err != nil {
		t.Fatal(err)
	}
	feed(c, pk, []event{{t: 4, ev: fabric.EvDeliver, link: 0, pkt: 2}})
	c.Close(5)
	if sAll.Packets() != 3 || sOne.Packets() != 1 {
		t.Errorf("packets: all %d, filtered %d; want 3, 1", sAll.Packets(), sOne.Packets())
	}
	if g := readBack(t, one.Bytes()); len(g) != 1 || g[0].ID != pk[1].ID {
		t.Errorf("filtered capture: %+v", g)
	}
	if len(c.sinks) != 0 {
		t.Errorf("%d sinks left after Close", len(c.sinks))
	}
}

func TestSpecs(t *testing.T) {
	specs, err := ParseSpecs("h0, leaf0:3,p0-leaf0-spine1:ba")
	if err != nil {
		t.Fatal(err)
	}
	want := []Spec{{Name: "h0", Port: -1}, {Name: "leaf0", Port: 3}, {Name: "p0-leaf0-spine1", Port: -1, Dir: "BtoA"}}
	if d := cmp.Diff(want, specs); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	if got := specs[2].FileName(); got != "p0-leaf0-spine1_BtoA.pcapng" {
		t.Errorf("file name %q", got)
	}
	bad := []string{"", ",", "h0:x", ":3", "h0:-1", "h0,h0"}
	for _, s := range bad {
		if _, err := ParseSpecs(s); !errors.Is(err, ErrBadSpec) {
			t.Errorf("ParseSpecs(%q) = %v, want ErrBadSpec", s, err)
		}
	}
	l := LayoutOf(line())
	for _, s := range []string{"h9", "h0:5", "h0:ab", "h0-leaf0:3"} {
		sp, err := ParseSpec(s)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.resolve(sp); !errors.Is(err, ErrBadSpec) {
			t.Errorf("resolve(%q) = %v, want ErrBadSpec", s, err)
		}
	}
}

func TestOpenWritesFiles(t *testing.T) {
	dir := t.TempDir()
	specs, _ := ParseSpecs("h0,leaf0-h1:AtoB")
	c, err := Open(dir, specs, LayoutOf(line()), nil)
	if err != nil {
		t.Fatal(err)
	}
	pool := packet.NewPool()
	feed(c, packets(pool, 1), []event{{t: 5, ev: fabric.EvTransmit, link: 0}, {t: 6, ev: fabric.EvDeliver, link: 2}})
	if err := c.Close(10); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"h0.pcapng", "leaf0-h1_AtoB.pcapng"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if _, pk, err := ReadAll(bytes.NewReader(b)); err != nil || len(pk) != 1 {
			t.Errorf("%s: %d packets, %v", f, len(pk), err)
		}
	}
	if _, err := Open(dir, []Spec{{Name: "nope", Port: -1}}, LayoutOf(line()), nil); !errors.Is(err, ErrBadSpec) {
		t.Errorf("Open with unknown point: %v", err)
	}
}

func TestTee(t *testing.T) {
	if Tee(nil, nil) != nil {
		t.Error("Tee of nils is not nil")
	}
	c := newCapture(LayoutOf(line()))
	if Tee(nil, c) != fabric.Observer(c) {
		t.Error("Tee of one observer wraps it")
	}
	var a, b countObs
	o := Tee(&a, nil, &b)
	o.Observe(0, fabric.EvDrop, fabric.Point{Link: 1}, nil, fabric.DropTTL)
	if a != 1 || b != 1 {
		t.Errorf("counts %d %d", a, b)
	}
}

type countObs int

func (c *countObs) Observe(sim.Time, fabric.Event, fabric.Point, *packet.Buffer, fabric.DropReason) {
	*c++
}

// TestObserveNoAllocs: recording a packet (annotations included) and
// ignoring a point that is not captured allocate nothing.
func TestObserveNoAllocs(t *testing.T) {
	pool := packet.NewPool()
	pk := packets(pool, 1)
	c := newCapture(LayoutOf(line()))
	for _, name := range []string{"h0-leaf0:ab", "h0", "leaf0"} {
		sp, _ := ParseSpec(name)
		c.add(sp, nopCloser{io.Discard}, nil)
	}
	now := sim.Time(0)
	allocs := testing.AllocsPerRun(1000, func() {
		now++
		c.Observe(now, fabric.EvEnqueue, fabric.Point{Link: 0}, pk[0], 0)
		c.Observe(now, fabric.EvMark, fabric.Point{Link: 0}, pk[0], 0)
		c.Observe(now, fabric.EvTransmit, fabric.Point{Link: 0}, pk[0], 0)
		c.Observe(now, fabric.EvDeliver, fabric.Point{Link: 0}, pk[0], 0)
		c.Observe(now, fabric.EvTransmit, fabric.Point{Link: 2}, pk[0], 0)
		c.Observe(now, fabric.EvDrop, fabric.Point{Link: -1, Node: "leaf0"}, pk[0], fabric.DropNoRoute)
	})
	if allocs != 0 {
		t.Errorf("Observe allocates %v times per packet", allocs)
	}
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// TestCaptureSyntheticPayload: a packet whose payload is synthetic is
// written as it is on the wire (zeros where the content would be) and its
// comment says so, alongside the fabric's own notes.
func TestCaptureSyntheticPayload(t *testing.T) {
	pool := packet.NewPool()
	pk := packets(pool, 2)
	pk[1].Synthetic = append(pk[1].Synthetic, packet.Run{Off: 200, Len: 1, Stream: 9})
	c := newCapture(LayoutOf(line()))
	var buf closeBuffer
	sp, _ := ParseSpec("h0-leaf0")
	if _, err := c.add(sp, &buf, nil); err != nil {
		t.Fatal(err)
	}
	feed(c, pk, []event{
		{t: 100, ev: fabric.EvEnqueue, link: 0, pkt: 0},
		{t: 100, ev: fabric.EvTransmit, link: 0, pkt: 0},
		{t: 101, ev: fabric.EvEnqueue, link: 0, pkt: 1},
		{t: 101, ev: fabric.EvMark, link: 0, pkt: 1},
		{t: 101, ev: fabric.EvTransmit, link: 0, pkt: 1},
		{t: 200, ev: fabric.EvDeliver, link: 0, pkt: 0},
		{t: 201, ev: fabric.EvDeliver, link: 0, pkt: 1},
	})
	if err := c.Close(300); err != nil {
		t.Fatal(err)
	}
	want := []got{
		{"h0-leaf0:AtoB", 200, pk[0].ID, 0, ""},
		{"h0-leaf0:AtoB", 201, pk[1].ID, 0, "CE marked at h0-leaf0 (a->b); synthetic payload: 1 bytes zero-filled"},
	}
	if d := cmp.Diff(want, readBack(t, buf.Bytes())); d != "" {
		t.Errorf("capture (-want +got):\n%s", d)
	}
}

// TestCaptureHeaderOnlyPacket: a header-only packet (packet.Buffer.Elide)
// is written whole, its elided payload as the zeros it stands for: the
// same record as the packet that holds its bytes.
func TestCaptureHeaderOnlyPacket(t *testing.T) {
	pool := packet.NewPool()
	payload := make([]byte, 304)
	copy(payload[300:], "CRC!")
	d := udpPacket("198.18.0.1", "198.18.0.2", 49152, 53791, payload)
	var recs [2][]byte
	for i, elide := range []bool{false, true} {
		b := pool.Get(len(d))
		b.SetLen(copy(b.Tail(), d))
		off, _ := b.Offset(b.Data()[28:])
		b.Synthetic = append(b.Synthetic, packet.Run{Off: int32(off), Len: 300, Stream: 9})
		if elide {
			b = b.Elide(28, 300)
		}
		c := newCapture(LayoutOf(line()))
		var buf closeBuffer
		sp, _ := ParseSpec("h0-leaf0")
		if _, err := c.add(sp, &buf, nil); err != nil {
			t.Fatal(err)
		}
		feed(c, []*packet.Buffer{b}, []event{{t: 100, ev: fabric.EvDeliver, link: 0, pkt: 0}})
		if err := c.Close(300); err != nil {
			t.Fatal(err)
		}
		_, pkts, err := ReadAll(bytes.NewReader(buf.Bytes()))
		if err != nil || len(pkts) != 1 {
			t.Fatalf("read back %d packets: %v", len(pkts), err)
		}
		recs[i] = pkts[0].Data
	}
	if !bytes.Equal(recs[0], d) || !bytes.Equal(recs[1], d) {
		t.Errorf("captured %d and %d bytes (header-only second), want the %d-byte packet", len(recs[0]), len(recs[1]), len(d))
	}
}
