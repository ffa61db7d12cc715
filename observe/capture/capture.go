// Package capture records what crosses mrlab's fabric as pcapng files that
// Wireshark opens: one interface per capture point direction (a link
// direction, a node's port in or out), lab-time timestamps in nanoseconds,
// and on every packet the fabric dropped, marked or corrupted a comment
// saying so and where ("dropped: queue full at p0-leaf0-spine1 (a->b)").
//
// A Capture is a fabric.Observer. Points that are not captured cost one
// slice index per packet event; a network with no observer costs nothing.
package capture

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
)

// Matcher selects packets for a sink; nil matches every packet. ip is the
// packet from its IPv4 header. Filter is the usual implementation.
type Matcher interface {
	Match(ip []byte) bool
}

// sink is one open capture: a spec written as one pcapng stream.
type sink struct {
	spec   Spec
	w      *Writer
	closer io.Closer
	match  Matcher
	ifaces []sinkIface
	c      *Capture
	closed bool
	// room, if set, says whether the writer can take n more bytes now; a
	// record that does not fit is lost (counted), never blocking the loop.
	room func(n int) bool
	// limit, if > 0, ends the capture after that many packets.
	limit uint64
	done  bool
}

type sinkIface struct {
	resolved
	id       int
	seen     uint64
	dropped  uint64 // by the fabric
	lost     uint64 // for lack of room
	first    sim.Time
	last     sim.Time
	hasFirst bool
}

// Spec returns the capture point the sink records.
func (s *sink) Spec() Spec { return s.spec }

// Packets returns how many packets the sink has written.
func (s *sink) Packets() uint64 {
	var n uint64
	for i := range s.ifaces {
		n += s.ifaces[i].seen
	}
	return n
}

// Lost returns how many packets the sink could not write for lack of room.
func (s *sink) Lost() uint64 {
	var n uint64
	for i := range s.ifaces {
		n += s.ifaces[i].lost
	}
	return n
}

// Done reports whether the sink has written its packet limit.
func (s *sink) Done() bool { return s.done }

// tap is one interface of one sink on a direction or node.
type tap struct {
	sink  *sink
	iface int // index into sink.ifaces
}

// Note flags: what happened to a packet on a direction before it is
// recorded.
const (
	noteMarked uint8 = 1 << iota
	noteCorrupted
	noteDuplicate
	noteSent // recorded by a sending-side tap
)

type pendKey struct {
	dir int
	id  uint64
}

// Capture is a fabric.Observer that writes the packets crossing its points
// to pcapng sinks. It is not safe for concurrent use: it runs on the event
// loop's goroutine, and sinks are added and removed there too.
type Capture struct {
	layout Layout
	// byLink maps fabric.Point.Link to the taps on that direction, and
	// dirOf to the Layout.Dirs index.
	byLink [][]tap
	dirOf  []int
	byNode map[string][]tap
	labels []string // per Layout.Dirs index
	// pending holds marks and corruptions seen on a direction until the
	// packet is recorded; entries leave at delivery or drop.
	pending map[pendKey]uint8
	// damaged remembers where recently corrupted packets had a bit
	// flipped (by packet id; a ring of the last maxDamaged bounds it), so
	// a capture further along says so: such a packet often shows in
	// Wireshark as malformed or with a bad checksum.
	damaged recent[int] // packet id -> Layout.Dirs index
	// ids numbers packets in the order the capture first records them
	// (Record.PacketID): the fabric's IDs depend on which pool made the
	// packet, which a partitioned run changes; this order does not. A
	// ring of the last maxIDs bounds it: a packet recorded again after
	// maxIDs others gets a new number.
	ids     recent[uint64]
	nextID  uint64
	sinks   []*sink
	scratch []byte
	// scratch2 holds a comment with an upstream-damage note added.
	scratch2 []byte
	// synScratch holds a comment with the synthetic-payload note added.
	synScratch []byte
	// whole holds a header-only packet's bytes, its elided payload as the
	// zeros it stands for (packet.Buffer.Elide).
	whole []byte
	// err is the first packet record that could not be written; Close
	// returns it.
	err error
}

var _ fabric.Observer = (*Capture)(nil)

// newCapture returns a Capture for a network with the given layout and no sinks.
func newCapture(l Layout) *Capture {
	c := &Capture{layout: l, byNode: map[string][]tap{}, pending: map[pendKey]uint8{}, scratch: make([]byte, 0, 256),
		damaged: newRecent[int](maxDamaged), ids: newRecent[uint64](maxIDs)}
	maxIdx := -1
	for _, d := range l.Dirs {
		maxIdx = max(maxIdx, d.Index)
	}
	c.byLink = make([][]tap, maxIdx+1)
	c.dirOf = make([]int, maxIdx+1)
	for i := range c.dirOf {
		c.dirOf[i] = -1
	}
	for i, d := range l.Dirs {
		c.dirOf[d.Index] = i
		c.labels = append(c.labels, d.Label())
	}
	return c
}

// add starts capturing spec into w as a pcapng stream. m filters packets
// (nil takes all). If w is an io.Closer, Close closes it.
func (c *Capture) add(spec Spec, w io.Writer, m Matcher) (*sink, error) {
	rs, err := c.layout.resolve(spec)
	if err != nil {
		return nil, err
	}
	pw, err := NewWriter(w, "mrlab capture "+spec.String())
	if err != nil {
		return nil, fmt.Errorf("starting capture %s: %w", spec, err)
	}
	s := &sink{spec: spec, w: pw, match: m, c: c}
	if cl, ok := w.(io.Closer); ok {
		s.closer = cl
	}
	for _, r := range rs {
		id, err := pw.AddInterface(r.iface)
		if err != nil {
			return nil, fmt.Errorf("starting capture %s: %w", spec, err)
		}
		s.ifaces = append(s.ifaces, sinkIface{resolved: r, id: id})
	}
	for i, si := range s.ifaces {
		t := tap{sink: s, iface: i}
		if si.dir < 0 {
			c.byNode[si.node] = append(c.byNode[si.node], t)
		} else {
			idx := c.layout.Dirs[si.dir].Index
			c.byLink[idx] = append(c.byLink[idx], t)
		}
	}
	c.sinks = append(c.sinks, s)
	return s, nil
}

// Open creates one file per spec in dir (named by Spec.FileName) and
// starts capturing into them: the --capture and --capture-dir flags.
func Open(dir string, specs []Spec, l Layout, m Matcher) (*Capture, error) {
	c := newCapture(l)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating capture directory: %w", err)
	}
	for _, sp := range specs {
		if _, err := c.layout.resolve(sp); err != nil {
			c.Close(0)
			return nil, err
		}
		f, err := os.Create(filepath.Join(dir, sp.FileName()))
		if err != nil {
			c.Close(0)
			return nil, fmt.Errorf("creating capture file for %s: %w", sp, err)
		}
		if _, err := c.add(sp, f, m); err != nil {
			f.Close()
			c.Close(0)
			return nil, err
		}
	}
	return c, nil
}

// maxDamaged bounds how many corrupted packets a Capture follows at once
// (a corrupted packet crosses the fabric in far fewer events).
const maxDamaged = 4096

// Observe implements fabric.Observer.
func (c *Capture) Observe(now sim.Time, ev fabric.Event, pt fabric.Point, p *packet.Buffer, reason fabric.DropReason) {
	if ev == fabric.EvCorrupt && pt.Link >= 0 && pt.Link < len(c.dirOf) && c.dirOf[pt.Link] >= 0 {
		c.noteDamage(p.ID, c.dirOf[pt.Link])
	}
	if pt.Link >= 0 {
		if pt.Link >= len(c.byLink) || len(c.byLink[pt.Link]) == 0 {
			return
		}
		c.observeDir(now, ev, pt.Link, p, reason)
		return
	}
	if len(c.byNode) == 0 {
		return
	}
	if taps := c.byNode[pt.Node]; len(taps) > 0 {
		c.observeNode(now, ev, pt.Node, taps, p, reason)
	}
}

func (c *Capture) observeDir(now sim.Time, ev fabric.Event, link int, p *packet.Buffer, reason fabric.DropReason) {
	taps := c.byLink[link]
	dir := c.dirOf[link]
	key := pendKey{dir, p.ID}
	switch ev {
	case fabric.EvMark:
		c.pending[key] |= noteMarked
	case fabric.EvCorrupt:
		c.pending[key] |= noteCorrupted
	case fabric.EvDuplicate:
		c.pending[key] |= noteDuplicate
	case fabric.EvTransmit:
		notes := c.pending[key]
		sent := false
		for _, t := range taps {
			if t.sink.ifaces[t.iface].role == roleTx {
				c.record(now, t, p, c.comment(notes, fabric.DropNone, c.labels[dir]), false)
				sent = true
			}
		}
		if sent {
			// So a later loss in flight is not shown on the sending
			// side a second time.
			c.pending[key] = notes | noteSent
		}
	case fabric.EvDeliver:
		notes := c.pending[key]
		var com []byte
		for _, t := range taps {
			if t.sink.ifaces[t.iface].role != roleTx {
				if com == nil {
					com = c.comment(notes, fabric.DropNone, c.labels[dir])
				}
				c.record(now, t, p, com, false)
			}
		}
		if notes != 0 {
			delete(c.pending, key)
		}
	case fabric.EvDrop:
		notes := c.pending[key]
		com := c.comment(notes, reason, c.labels[dir])
		for _, t := range taps {
			if notes&noteSent != 0 && t.sink.ifaces[t.iface].role == roleTx {
				continue
			}
			c.record(now, t, p, com, true)
		}
		if notes != 0 {
			delete(c.pending, key)
		}
	}
}

// maxIDs bounds how many packets a Capture numbers at once.
const maxIDs = 1 << 16

// packetID returns the capture's number for the fabric's packet id.
func (c *Capture) packetID(id uint64) uint64 {
	if id == 0 {
		return 0
	}
	if n, ok := c.ids.get(id); ok {
		return n
	}
	c.nextID++
	c.ids.put(id, c.nextID)
	return c.nextID
}

// noteDamage remembers that packet id was corrupted on direction dir.
func (c *Capture) noteDamage(id uint64, dir int) {
	c.damaged.put(id, dir)
}

func (c *Capture) observeNode(now sim.Time, ev fabric.Event, node string, taps []tap, p *packet.Buffer, reason fabric.DropReason) {
	var com []byte
	drop := ev == fabric.EvDrop
	switch ev {
	case fabric.EvDrop:
		com = c.comment(0, reason, node)
	case fabric.EvMark:
		com = c.comment(noteMarked, fabric.DropNone, node)
	case fabric.EvCorrupt:
		com = c.comment(noteCorrupted, fabric.DropNone, node)
	default:
		// Packets passing through a node are recorded on its ports.
		return
	}
	for _, t := range taps {
		c.record(now, t, p, com, drop)
	}
}

func (c *Capture) record(now sim.Time, t tap, p *packet.Buffer, comment []byte, drop bool) {
	s := t.sink
	if s.closed || s.done {
		return
	}
	data := p.Data()
	if _, n := p.Hole(); n > 0 {
		c.whole = p.AppendBytes(c.whole[:0])
		data = c.whole
	}
	if s.match != nil && !s.match.Match(data) {
		return
	}
	si := &s.ifaces[t.iface]
	// Notes first, so the room check counts the record as written.
	if dir, ok := c.damaged.get(p.ID); ok && si.dir != dir {
		// Corrupted before it got here, on another link direction.
		b := append(c.scratch2[:0], comment...)
		if len(b) > 0 {
			b = append(b, "; "...)
		}
		b = c.appendUpstreamDamage(b, dir)
		c.scratch2, comment = b, b
	}
	if len(p.Synthetic) > 0 {
		comment = c.syntheticNote(comment, p)
	}
	if s.room != nil && !s.room(epbSize(len(data), len(comment))) {
		si.lost++
		return
	}
	if !si.hasFirst {
		si.first, si.hasFirst = now, true
	}
	si.last = now
	si.seen++
	if drop {
		si.dropped++
	}
	if s.limit > 0 && s.Packets() >= s.limit {
		s.done = true
	}
	r := Record{Iface: si.id, Time: now, Data: data, Flags: si.flags, PacketID: c.packetID(p.ID), Comment: comment}
	if err := s.w.WritePacket(&r); err != nil {
		if c.err == nil {
			c.err = fmt.Errorf("capture %s: %w", s.spec, err)
		}
	}
}

// syntheticNote appends to comment that the packet's payload is synthetic:
// the bytes are zeros standing for memory content the run did not
// materialize (softnic's synthetic payload mode).
func (c *Capture) syntheticNote(comment []byte, p *packet.Buffer) []byte {
	n := 0
	for _, r := range p.Synthetic {
		n += int(r.Len)
	}
	b := append(c.synScratch[:0], comment...)
	if len(b) > 0 {
		b = append(b, "; "...)
	}
	b = append(b, "synthetic payload: "...)
	b = strconv.AppendInt(b, int64(n), 10)
	b = append(b, " bytes zero-filled"...)
	c.synScratch = b
	return b
}

// appendUpstreamDamage appends the note for a packet corrupted on another
// link direction: where, and what Wireshark will make of it.
func (c *Capture) appendUpstreamDamage(b []byte, dir int) []byte {
	b = append(b, "corrupted upstream at "...)
	b = append(b, c.labels[dir]...)
	return append(b, " (one bit flipped by a netem corrupt impairment; Wireshark may call it malformed)"...)
}

// comment builds a packet's annotation in the capture's scratch buffer
// (valid until the next call): "CE marked at X; dropped: queue full at X".
func (c *Capture) comment(notes uint8, reason fabric.DropReason, where string) []byte {
	b := c.scratch[:0]
	sep := func() {
		if len(b) > 0 {
			b = append(b, "; "...)
		}
	}
	if notes&noteDuplicate != 0 {
		b = append(b, "duplicated at "...)
		b = append(b, where...)
	}
	if notes&noteMarked != 0 {
		sep()
		b = append(b, "CE marked at "...)
		b = append(b, where...)
	}
	if notes&noteCorrupted != 0 {
		sep()
		b = append(b, "corrupted at "...)
		b = append(b, where...)
	}
	if reason != fabric.DropNone {
		sep()
		b = append(b, "dropped: "...)
		b = appendReason(b, reason)
		b = append(b, " at "...)
		b = append(b, where...)
	}
	c.scratch = b
	return b
}

var reasonNames = [...]string{
	fabric.DropNone:       "none",
	fabric.DropQueueFull:  "queue full",
	fabric.DropImpairment: "impairment loss",
	fabric.DropLinkDown:   "link down",
	fabric.DropNoRoute:    "no route",
	fabric.DropBlackHole:  "black hole (failed port)",
	fabric.DropTTL:        "TTL expired",
	fabric.DropMalformed:  "malformed IPv4",
	fabric.DropFCS:        "FCS error (lost on the wire)",
}

func appendReason(b []byte, r fabric.DropReason) []byte {
	if int(r) < len(reasonNames) {
		return append(b, reasonNames[r]...)
	}
	b = append(b, "reason "...)
	return strconv.AppendUint(b, uint64(r), 10)
}

// remove stops a sink: it writes per-interface statistics, flushes and
// closes the sink's writer if it is a Closer.
func (c *Capture) remove(s *sink, now sim.Time) error {
	if s.closed {
		return nil
	}
	s.closed = true
	for _, si := range s.ifaces {
		if si.dir < 0 {
			c.byNode[si.node] = without(c.byNode[si.node], s)
		} else {
			idx := c.layout.Dirs[si.dir].Index
			c.byLink[idx] = without(c.byLink[idx], s)
		}
	}
	for i, x := range c.sinks {
		if x == s {
			c.sinks = append(c.sinks[:i], c.sinks[i+1:]...)
			break
		}
	}
	var err error
	for _, si := range s.ifaces {
		st := Stats{Start: si.first, End: now, Received: si.seen, Lost: si.lost}
		if si.dropped > 0 {
			st.Comment = "fabric dropped " + strconv.FormatUint(si.dropped, 10) + " of these packets"
		}
		if e := s.w.WriteStats(si.id, st); e != nil && err == nil {
			err = e
		}
	}
	if e := s.w.Flush(); e != nil && err == nil {
		err = e
	}
	if s.closer != nil {
		if e := s.closer.Close(); e != nil && err == nil {
			err = e
		}
	}
	if err != nil {
		return fmt.Errorf("closing capture %s: %w", s.spec, err)
	}
	return nil
}

// Close removes every sink (see remove) at lab time now.
func (c *Capture) Close(now sim.Time) error {
	var first error
	for len(c.sinks) > 0 {
		if err := c.remove(c.sinks[0], now); err != nil && first == nil {
			first = err
		}
	}
	if first == nil {
		first = c.err
	}
	return first
}

// without returns taps minus those of sink s, reusing the slice.
func without(taps []tap, s *sink) []tap {
	kept := taps[:0]
	for _, t := range taps {
		if t.sink != s {
			kept = append(kept, t)
		}
	}
	return kept
}
