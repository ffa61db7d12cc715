package transporttest

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
)

func TestMemoryResolve(t *testing.T) {
	m := NewMemory()
	buf := make([]byte, 100)
	m.Register(7, 1000, buf, transport.AccessLocalWrite|transport.AccessRemoteWrite)
	m.Register(8, 5000, make([]byte, 10), transport.AccessRemoteRead)
	tests := []struct {
		name   string
		key    uint32
		addr   uint64
		n      int
		access transport.Access
		want   transport.Status
		len    int
	}{
		{"whole region", 7, 1000, 100, transport.AccessRemoteWrite, transport.StatusOK, 100},
		{"inside", 7, 1050, 10, transport.AccessRemoteWrite, transport.StatusOK, 10},
		{"empty at end", 7, 1100, 0, transport.AccessRemoteWrite, transport.StatusOK, 0},
		{"past end", 7, 1095, 10, transport.AccessRemoteWrite, transport.StatusRemoteAccess, 0},
		{"before start", 7, 999, 1, transport.AccessRemoteWrite, transport.StatusRemoteAccess, 0},
		{"huge n", 7, 1000, 1 << 62, transport.AccessRemoteWrite, transport.StatusRemoteAccess, 0},
		{"addr overflow", 7, ^uint64(0), 2, transport.AccessRemoteWrite, transport.StatusRemoteAccess, 0},
		{"unknown key", 9, 1000, 1, transport.AccessRemoteWrite, transport.StatusRemoteAccess, 0},
		{"no permission", 8, 5000, 1, transport.AccessRemoteWrite, transport.StatusRemoteAccess, 0},
		{"read ok", 8, 5000, 10, transport.AccessRemoteRead, transport.StatusOK, 10},
		{"local check", 9, 0, 1, transport.AccessLocalWrite, transport.StatusLocalProtection, 0},
		{"local gather needs no flag", 8, 5002, 3, 0, transport.StatusOK, 3},
	}
	for _, tc := range tests {
		b, st := m.Resolve(tc.key, tc.addr, tc.n, tc.access)
		if st != tc.want || len(b) != tc.len {
			t.Errorf("%s: Resolve = %d bytes, %v; want %d bytes, %v", tc.name, len(b), st, tc.len, tc.want)
		}
	}
	m.Deregister(7)
	if _, st := m.Resolve(7, 1000, 1, 0); st == transport.StatusOK {
		t.Error("deregistered region still resolves")
	}
	if a := testing.AllocsPerRun(100, func() { m.Resolve(8, 5000, 4, transport.AccessRemoteRead) }); a != 0 {
		t.Errorf("Resolve allocates %v times", a)
	}
}

// fakePair connects two hosts speaking fakeProto.
func fakePair(t *testing.T, cfg Config) (*Net, *Conn) {
	t.Helper()
	n := New(sim.NewLoop(), cfg)
	a := n.AddHost("a", fakeProto{})
	b := n.AddHost("b", fakeProto{})
	c, err := n.Connect(a, b, sim.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	return n, c
}

func TestNetLatency(t *testing.T) {
	cfg := Config{LinkRate: 8e9, LinkDelay: 2 * sim.Microsecond} // 1 byte per ns
	n, c := fakePair(t, cfg)
	fc := c.T.(*fakeConn)
	start := n.Loop.Now()
	fc.queue = append(fc.queue, fakeItem{port: 0, sport: 50001, size: 972}) // 1000 IP bytes
	c.Host.kick(start)
	n.Loop.Run()
	got := c.Remote.T.(*fakeConn).got
	if len(got) != 1 {
		t.Fatalf("got %d packets, want 1", len(got))
	}
	// Two hops, each: serialize 1000+FrameOverhead bytes at 1 B/ns, then 2us.
	want := start + 2*(sim.Time(1000+FrameOverhead)+2*sim.Microsecond)
	if got[0].at != want {
		t.Errorf("arrival at %v, want %v", got[0].at, want)
	}
}

// TestNetPathFIFO: with skew, paths reorder against each other but every
// path stays FIFO; with random reordering, FIFO breaks.
func TestNetPathFIFO(t *testing.T) {
	run := func(cfg Config) (crossReorders, pathReorders int) {
		n, c := fakePair(t, cfg)
		fc := c.T.(*fakeConn)
		for i := 0; i < 400; i++ {
			fc.queue = append(fc.queue, fakeItem{port: 0, sport: 50000 + uint16(i%8), size: 100})
		}
		c.Host.kick(n.Loop.Now())
		n.Loop.Run()
		got := c.Remote.T.(*fakeConn).got
		if len(got) != 400 {
			t.Fatalf("got %d, want 400", len(got))
		}
		last := map[uint16]uint32{}
		var prev uint32
		for _, r := range got {
			if r.seq < prev {
				crossReorders++
			}
			prev = r.seq
			if r.seq < last[r.sport] {
				pathReorders++
			}
			last[r.sport] = r.seq
		}
		return
	}
	cross, path := run(Config{Seed: 1, PathSkew: 3 * sim.Microsecond})
	if cross == 0 || path != 0 {
		t.Errorf("skew only: %d cross-path reorders (want > 0), %d within a path (want 0)", cross, path)
	}
	_, path = run(Config{Seed: 1, Reorder: 0.3, ReorderDelay: 10 * sim.Microsecond})
	if path == 0 {
		t.Error("random reordering never reordered a path")
	}
}

func TestNetFaultsDeterministic(t *testing.T) {
	run := func(seed uint64) Stats {
		n, c := fakePair(t, Config{Seed: seed, Loss: 0.1, Dup: 0.05})
		fc := c.T.(*fakeConn)
		for i := 0; i < 5000; i++ {
			fc.queue = append(fc.queue, fakeItem{port: 0, sport: 50000, size: 64})
		}
		c.Host.kick(n.Loop.Now())
		n.Loop.Run()
		return n.Stats
	}
	a, b := run(3), run(3)
	if diff := cmp.Diff(a, b); diff != "" {
		t.Errorf("same seed, different runs (-first +second):\n%s", diff)
	}
	if a.Lost < 400 || a.Lost > 600 {
		t.Errorf("lost %d of ~5000 at 10%%", a.Lost)
	}
	if a.Duplicated < 150 || a.Duplicated > 350 {
		t.Errorf("duplicated %d of ~4500 at 5%%", a.Duplicated)
	}
	if run(4) == a {
		t.Error("different seeds gave identical stats")
	}
}

// TestNetIncast: four senders at line rate into one downlink: the downlink
// runs at its rate, the queue builds, ECN marks and drop-tail work.
func TestNetIncast(t *testing.T) {
	cfg := Config{LinkRate: 10e9, ECNThreshold: 20000, QueueBytes: 100000}
	n := New(sim.NewLoop(), cfg)
	dst := n.AddHost("dst", fakeProto{})
	var conns []*Conn
	for i := 0; i < 4; i++ {
		h := n.AddHost(string(rune('a'+i)), fakeProto{})
		c, err := n.Connect(h, dst, sim.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	start := n.Loop.Now()
	for _, c := range conns {
		fc := c.T.(*fakeConn)
		for i := 0; i < 500; i++ {
			fc.queue = append(fc.queue, fakeItem{port: 0, sport: 50000, size: 1000})
		}
		c.Host.kick(start)
	}
	n.Loop.Run()
	var got int
	var last sim.Time
	for _, c := range conns {
		r := c.Remote.T.(*fakeConn).got
		got += len(r)
		last = max(last, r[len(r)-1].at)
	}
	if n.Stats.QueueDrops == 0 || n.Stats.Marked == 0 {
		t.Errorf("no queue drops (%d) or marks (%d) under 4:1 incast", n.Stats.QueueDrops, n.Stats.Marked)
	}
	if uint64(got)+n.Stats.QueueDrops != 2000 {
		t.Errorf("delivered %d + dropped %d != 2000 sent", got, n.Stats.QueueDrops)
	}
	// The downlink drains at 10 Gb/s: delivering got packets takes at least
	// got*(1028+overhead)*0.8ns.
	minTime := sim.Time(float64(got*(1028+FrameOverhead)) * 0.8)
	if el := last - start; el < minTime || el > minTime+minTime/5 {
		t.Errorf("delivered %d packets in %v, want about %v (link rate)", got, el, minTime)
	}
}

func TestNetFilterAndPlanes(t *testing.T) {
	n, c := fakePair(t, Config{Ports: 2})
	var port0 int
	var dropped, marked uint32
	n.Filter = func(p *Packet) Verdict {
		if p.Port != 0 {
			return Pass
		}
		port0++
		seq := uint32(p.Payload[11])<<8 | uint32(p.Payload[12])
		switch port0 {
		case 2:
			dropped = seq
			return Drop
		case 3:
			marked = seq
			return MarkCE
		}
		return Pass
	}
	fc := c.T.(*fakeConn)
	for i := 0; i < 4; i++ {
		fc.queue = append(fc.queue, fakeItem{port: 0, sport: 50000, size: 64})
	}
	n.SetPlaneUp(1, false)
	fc.queue = append(fc.queue, fakeItem{port: 1, sport: 50000, size: 64})
	c.Host.kick(n.Loop.Now())
	n.Loop.Run()
	var seqs []uint32
	var ce []bool
	for _, r := range c.Remote.T.(*fakeConn).got {
		seqs = append(seqs, r.seq)
		ce = append(ce, r.ce)
	}
	if len(seqs) != 3 {
		t.Fatalf("delivered %v, want 3 packets", seqs)
	}
	for i, s := range seqs {
		if s == dropped {
			t.Errorf("dropped packet %d was delivered", s)
		}
		if ce[i] != (s == marked) {
			t.Errorf("packet %d: CE %v, want %v", s, ce[i], s == marked)
		}
	}
	if n.Stats.DownDrops != 1 || n.Stats.FilterDrops != 1 {
		t.Errorf("down drops %d, filter drops %d; want 1, 1", n.Stats.DownDrops, n.Stats.FilterDrops)
	}
}

// sealProto is fakeProto with a whole-packet check: the last byte of the
// IPv4 packet must be the XOR of the rest.
type sealProto struct{ fakeProto }

func (sealProto) Seal(ip []byte) {
	var x byte
	for _, b := range ip[:len(ip)-1] {
		x ^= b
	}
	ip[len(ip)-1] = x
}

func (sealProto) Check(ip []byte) bool {
	var x byte
	for _, b := range ip {
		x ^= b
	}
	return x == 0
}

// TestNetSealer: hosts seal what an IPSealer protocol sends and check what
// it receives; a packet corrupted in flight is counted and dropped.
func TestNetSealer(t *testing.T) {
	n := New(sim.NewLoop(), Config{})
	a := n.AddHost("a", sealProto{})
	b := n.AddHost("b", sealProto{})
	c, err := n.Connect(a, b, sim.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	k := 0
	n.Filter = func(p *Packet) Verdict {
		if k++; k == 2 {
			p.IP[len(p.IP)-2] ^= 1 // corrupt one packet's payload
		}
		return Pass
	}
	fc := c.T.(*fakeConn)
	for i := 0; i < 3; i++ {
		fc.queue = append(fc.queue, fakeItem{port: 0, sport: 50000, size: 100})
	}
	c.Host.kick(n.Loop.Now())
	n.Loop.Run()
	if got := len(c.Remote.T.(*fakeConn).got); got != 2 || b.Stats.BadCheck != 1 {
		t.Errorf("delivered %d (want 2), bad checks %d (want 1)", got, b.Stats.BadCheck)
	}
}
