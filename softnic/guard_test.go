package softnic

import (
	"encoding/binary"
	"math/bits"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/metaroce/wire"
	"github.com/mrlab/mrlab/transport/rocev2"
	"github.com/mrlab/mrlab/transport/rocev2/ib"
)

// realCases are the transports with a handshake (the toy has none).
func realCases() []transportCase { return transportCases()[1:] }

// captureSetup dials from p.a to p.b with every packet a sends dropped and
// returns the first one: a genuine setup request (SYN or CM REQ) to forge
// others from.
func captureSetup(t *testing.T, p *pair, kind transport.Kind) []byte {
	t.Helper()
	var tmpl []byte
	p.ab[0].drop = func(b []byte) bool {
		if tmpl == nil {
			tmpl = append([]byte(nil), b...)
		}
		return true
	}
	c, err := p.a.Dial(addrB, ConnOptions{Transport: kind, PD: p.a.AllocPD()})
	if err != nil {
		t.Fatal(err)
	}
	p.loop.RunUntil(p.loop.Now() + sim.Microsecond)
	c.Close()
	if tmpl == nil {
		t.Fatal("no setup request captured")
	}
	return tmpl
}

// forge returns the setup request tmpl with request identity i: a new
// MetaRoCE nonce or CM transaction id, sealed again, as a host crafting
// requests on a raw socket would send them (with its own address).
func forge(tmpl []byte, kind transport.Kind, i uint64) []byte {
	ip := append([]byte(nil), tmpl...)
	pl := ip[IPv4UDPSize:]
	id := i*0x9E3779B97F4A7C15 | 1
	if kind == transport.RoCEv2 {
		binary.BigEndian.PutUint64(pl[ib.BTHSize+8:], id)
		rocev2.SealICRC(ip)
		return ip
	}
	binary.BigEndian.PutUint64(pl[24:], id)
	wire.Seal(pl, wire.SetupSize)
	return ip
}

// TestForgedSetupFlood: 5 bursts of 20,000 forged setup requests from one
// host to a listener. The victim keeps at most halfOpenPerSource half-open
// connections, sends at most one packet per request, grows its heap by
// less than 10 MB in all, and never hands a forged connection to its
// listener; the flooding host is refused, not the NIC's other work.
func TestForgedSetupFlood(t *testing.T) {
	const bursts, perBurst = 5, 20000
	for _, tc := range realCases() {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, 1, tc.protos)
			tmpl := captureSetup(t, p, tc.kind)
			p.ab[0].drop = nil
			p.ba[0].drop = func([]byte) bool { return true } // the forger ignores answers
			accepted := 0
			if err := p.b.Listen(&ListenOptions{ConnOptions: ConnOptions{PD: p.b.AllocPD()},
				OnConn: func(*Conn) { accepted++ }}); err != nil {
				t.Fatal(err)
			}
			var ms runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&ms)
			heap0 := ms.HeapAlloc
			tx0 := p.b.Stats().TxPackets
			maxHalf := 0
			for b := 0; b < bursts; b++ {
				for i := 0; i < perBurst; i++ {
					ip := forge(tmpl, tc.kind, uint64(b*perBurst+i+1))
					buf := p.pool.Get(len(ip))
					buf.SetLen(len(ip))
					copy(buf.Data(), ip)
					p.b.Receive(p.loop.Now(), 0, buf)
					maxHalf = max(maxHalf, p.b.HalfOpen())
				}
				p.loop.RunUntil(p.loop.Now() + 10*sim.Millisecond)
			}
			runtime.GC()
			runtime.ReadMemStats(&ms)
			grew := int64(ms.HeapAlloc) - int64(heap0)
			sent := p.b.Stats().TxPackets - tx0
			s := p.b.Stats()
			t.Logf("%d forged requests: %d packets sent, %d half-open at most, %d connections opened, %d refused, heap %+d KB",
				bursts*perBurst, sent, maxHalf, s.HalfOpenOpened, s.Drops[DropSetupLimit], grew>>10)
			if accepted != 0 || s.Accepted != 0 {
				t.Errorf("listener handed %d forged connections (NIC counted %d), want 0", accepted, s.Accepted)
			}
			if sent > bursts*perBurst {
				t.Errorf("%d packets sent for %d forged requests, want at most one each", sent, bursts*perBurst)
			}
			if maxHalf > halfOpenPerSource {
				t.Errorf("%d half-open connections at once, want at most %d", maxHalf, halfOpenPerSource)
			}
			if len(p.b.conns) > 4*halfOpenPerSource {
				t.Errorf("connection table grew to %d for a flood from one source", len(p.b.conns))
			}
			if grew > 10<<20 {
				t.Errorf("heap grew %d MB, want at most 10", grew>>20)
			}
			src := p.b.Sources()
			if len(src) != 1 || src[0].Addr != addrA || src[0].RefusedHalfOpen < bursts*perBurst-4*halfOpenPerSource {
				t.Errorf("per-source counters %+v: want the flood counted against %v", src, addrA)
			}
			// The flooder's half-open connections expire; then it can
			// connect like anyone, and its connection reaches the
			// listener only once established.
			p.ba[0].drop = nil
			p.loop.RunUntil(p.loop.Now() + 60*sim.Second)
			if h, n := p.b.HalfOpen(), len(p.b.Conns()); h != 0 || n != 0 {
				t.Fatalf("%d half-open connections (%d in all) left after a minute", h, n)
			}
			var got *Conn
			p.b.Listen(&ListenOptions{ConnOptions: ConnOptions{PD: p.b.AllocPD()}, OnConn: func(c *Conn) {
				if !handshakeDone(c.tc) {
					t.Error("listener handed a connection whose handshake is not done")
				}
				got = c
			}})
			c, err := p.a.Dial(addrB, ConnOptions{Transport: tc.kind, PD: p.a.AllocPD()})
			if err != nil {
				t.Fatal(err)
			}
			p.loop.RunUntil(p.loop.Now() + 10*sim.Millisecond)
			if got == nil || c.State() != transport.StateEstablished {
				t.Errorf("honest connection after the flood: dialer %v, accepted %v", c.State(), got)
			}
		})
	}
}

// TestListenerHalfOpenBound: half-open connections from many sources are
// bounded per listener, the oldest evicted silently.
func TestListenerHalfOpenBound(t *testing.T) {
	for _, tc := range realCases() {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, 1, tc.protos)
			tmpl := captureSetup(t, p, tc.kind)
			p.b.Listen(&ListenOptions{ConnOptions: ConnOptions{PD: p.b.AllocPD()}, OnConn: func(*Conn) { t.Error("forged connection accepted") }})
			const sources = 3 * halfOpenPerListener / halfOpenPerSource
			for s := 0; s < sources; s++ {
				for i := 0; i < halfOpenPerSource; i++ {
					ip := forge(tmpl, tc.kind, uint64(s*100+i+1))
					binary.BigEndian.PutUint32(ip[12:], 0xc6120100+uint32(s)) // source 198.18.1.s
					binary.BigEndian.PutUint16(ip[10:], 0)
					var sum uint32
					for k := 0; k < 20; k += 2 {
						sum += uint32(binary.BigEndian.Uint16(ip[k:]))
					}
					for sum > 0xffff {
						sum = sum&0xffff + sum>>16
					}
					binary.BigEndian.PutUint16(ip[10:], ^uint16(sum))
					if tc.kind == transport.RoCEv2 {
						rocev2.SealICRC(ip)
					}
					buf := p.pool.Get(len(ip))
					buf.SetLen(len(ip))
					copy(buf.Data(), ip)
					p.b.Receive(p.loop.Now(), 0, buf)
					if h := p.b.HalfOpen(); h > halfOpenPerListener {
						t.Fatalf("%d half-open on one listener, want at most %d", h, halfOpenPerListener)
					}
				}
			}
			s := p.b.Stats()
			if want := uint64(sources*halfOpenPerSource - halfOpenPerListener); s.HalfOpenEvicted != want {
				t.Errorf("evicted %d, want %d", s.HalfOpenEvicted, want)
			}
			if len(p.b.Sources()) != sources {
				t.Errorf("%d sources tracked, want %d", len(p.b.Sources()), sources)
			}
		})
	}
}

// TestKeysUnguessable: every key is 32 fresh random bits: each bit is set
// in half the keys, consecutive keys share no structure (half their bits
// differ), re-registering gives an unrelated key, and no key repeats while
// live or among the last recentKeys retired, so
// the expected number of guesses to hit one live region's key is 2^31
// (less the ~1,000 keys a guesser can rule out). Addresses are random and
// aligned, each independent of the one before. Both with the seeded stream
// (sim) and with CryptoSource (live).
func TestKeysUnguessable(t *testing.T) {
	const n = 20000
	for _, src := range []struct {
		name string
		s    rand.Source
	}{{"seeded", nil}, {"crypto", CryptoSource()}} {
		t.Run(src.name, func(t *testing.T) {
			loop := sim.NewLoop()
			nic, err := New(Config{Name: "n", Addr: addrA, Ports: 1, Sched: loop, Pool: newPair(t, 1, toyProtos).pool,
				Seed: 7, Protocols: toyProtos(), KeySource: src.s})
			if err != nil {
				t.Fatal(err)
			}
			pd := nic.AllocPD()
			var ones [32]int
			live := make(map[uint32]bool, n)
			var retired []uint32 // the last recentKeys deregistered
			var prev *MR
			flips, sameGap := 0, 0
			var gap uint64
			for i := 0; i < n; i++ {
				mr, err := pd.Register(make([]byte, 64), transport.AccessRemoteWrite)
				if err != nil {
					t.Fatal(err)
				}
				k := mr.RKey()
				// A key may come back only once it is neither live nor
				// among the last recentKeys retired: with random keys a
				// repeat of an older retired one has a birthday chance
				// of a few percent over n draws (a CI run met one).
				if k == 0 || live[k] || slices.Contains(retired, k) {
					t.Fatalf("key %#x drawn while live or recently retired (or zero)", k)
				}
				live[k] = true
				for b := 0; b < 32; b++ {
					ones[b] += int(k >> b & 1)
				}
				if mr.Addr()%mrAlign != 0 || mr.Addr() < vaFloor || mr.Addr() >= vaFloor+vaSpan {
					t.Fatalf("address %#x not aligned in the region space", mr.Addr())
				}
				if prev != nil {
					flips += bits.OnesCount32(k ^ prev.RKey())
					if g := mr.Addr() - prev.Addr(); g == gap {
						sameGap++
					} else {
						gap = g
					}
					// Every other region is deregistered: its key is
					// dead, and the next registration's is unrelated.
					if i%2 == 0 {
						old := prev.RKey()
						prev.Deregister()
						delete(live, old)
						if retired = append(retired, old); len(retired) > recentKeys {
							retired = retired[1:]
						}
						if nic.lookup(old) != nil {
							t.Fatal("deregistered key still valid")
						}
					}
				}
				prev = mr
			}
			for b, c := range ones {
				// 5.6 standard deviations of a fair coin over n draws.
				if f := float64(c) / n; f < 0.48 || f > 0.52 {
					t.Errorf("key bit %d set in %.3f of keys, want 0.5", b, f)
				}
			}
			if avg := float64(flips) / (n - 1); avg < 15.5 || avg > 16.5 {
				t.Errorf("consecutive keys differ in %.2f bits on average, want 16", avg)
			}
			if sameGap > 10 {
				t.Errorf("%d consecutive address gaps repeated: addresses predictable", sameGap)
			}
		})
	}
}

// TestKeyGuessingCostsHandshakes: a peer trying 10,000 wrong keys, 8 per
// connection (a refused connection request counts as 8 refused guesses).
// The first refused access on a connection moves it to Error at both ends
// (as an RC QP) and every later access on it is refused unchecked, so the
// victim checks one guess per completed handshake; after freeStrikes the
// guesser's connection requests are refused, with backoff, and counted
// for its address. The victim's memory is never written.
func TestKeyGuessingCostsHandshakes(t *testing.T) {
	const guesses, perConn = 10000, 8
	for _, tc := range realCases() {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, 1, tc.protos)
			vpd := p.b.AllocPD()
			victim := make([]byte, 4096)
			vmr, err := vpd.Register(victim, transport.AccessRemoteWrite|transport.AccessLocalWrite)
			if err != nil {
				t.Fatal(err)
			}
			p.b.Listen(&ListenOptions{ConnOptions: ConnOptions{PD: vpd}})
			apd := p.a.AllocPD()
			mine, err := apd.Register(make([]byte, 64), 0)
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			posted, dials, failedDials := 0, 0, 0
			for posted+failedDials*perConn < guesses {
				dials++
				c, err := p.a.Dial(addrB, ConnOptions{Transport: tc.kind, PD: apd})
				if err != nil {
					t.Fatal(err)
				}
				for end := p.loop.Now() + 100*sim.Second; c.State() == transport.StateConnecting && p.loop.Now() < end && p.loop.Next() <= end; {
					p.loop.Step()
				}
				if c.State() != transport.StateEstablished {
					failedDials++
					continue
				}
				for i := 0; i < perConn; i++ {
					key := rng.Uint32()
					if key == vmr.RKey() {
						key++
					}
					wr := &transport.WorkRequest{Op: transport.OpWrite, RemoteAddr: vmr.Addr(), RKey: key, NumSGE: 1}
					wr.SGL[0] = mine.SGE(0, 64)
					if c.PostSend(wr) == nil {
						posted++
					}
				}
				for end := p.loop.Now() + sim.Second; c.State() == transport.StateEstablished && p.loop.Now() < end && p.loop.Next() <= end; {
					p.loop.Step()
				}
				if c.State() != transport.StateError {
					t.Fatalf("dial %d: guessing connection %v after a refused key, want Error", dials, c.State())
				}
			}
			var st SourceStats
			for _, s := range p.b.Sources() {
				if s.Addr == addrA {
					st = s
				}
			}
			t.Logf("%d wrong keys posted over %d dials (%d refused): victim checked %d guesses on %d handshakes, refused %d requests while limited, %d access errors counted",
				posted, dials, failedDials, st.PoisonedConns, st.Established, st.RefusedLimited, st.AccessErrors)
			if st.PoisonedConns > st.Established || st.PoisonedConns == 0 {
				t.Errorf("victim checked %d guesses on %d handshakes: want at most one per handshake", st.PoisonedConns, st.Established)
			}
			if st.RefusedLimited == 0 {
				t.Errorf("guesser never rate-limited: %+v", st)
			}
			if st.AccessErrors < st.PoisonedConns {
				t.Errorf("access errors %d below poisoned connections %d", st.AccessErrors, st.PoisonedConns)
			}
			for _, b := range victim {
				if b != 0 {
					t.Fatal("victim region written")
				}
			}
		})
	}
}

// FuzzSetupPath drives a listener's setup path with a fuzzed sequence of
// setup requests, each 4 bytes: source (one of 24 addresses), operation
// (a new request, a repeat of an earlier one, a request with one byte
// changed, or time passing) and an argument. Whatever the sequence, the
// half-open bounds hold, a listener only ever gets connections whose
// handshake completed, nothing panics and no buffer leaks.
func FuzzSetupPath(f *testing.F) {
	f.Add([]byte{0, 0, 1, 0, 0, 1, 1, 0, 1, 0, 2, 0, 0, 2, 40, 7, 0, 3, 200, 0}, false)
	f.Add([]byte{3, 0, 9, 9, 3, 0, 9, 9, 4, 2, 33, 1, 3, 3, 255, 0}, true)
	f.Fuzz(func(t *testing.T, ops []byte, roce bool) {
		if len(ops) > 4*2000 {
			return
		}
		tc := realCases()[1]
		if roce {
			tc = realCases()[0]
		}
		p := newPair(t, 1, tc.protos)
		tmpl := captureSetup(t, p, tc.kind)
		p.ab[0].drop = nil
		p.ba[0].drop = func([]byte) bool { return true }
		p.b.Listen(&ListenOptions{ConnOptions: ConnOptions{PD: p.b.AllocPD()}, OnConn: func(c *Conn) {
			if !handshakeDone(c.tc) {
				t.Fatal("listener handed a connection whose handshake is not done")
			}
		}})
		var sent [][]byte
		for i := 0; i+4 <= len(ops); i += 4 {
			src, op, arg := ops[i]%24, ops[i+1]%4, ops[i+2]
			var ip []byte
			switch op {
			case 0:
				ip = forge(tmpl, tc.kind, uint64(i+1)<<8|uint64(arg))
			case 1:
				if len(sent) == 0 {
					continue
				}
				ip = append([]byte(nil), sent[int(arg)%len(sent)]...)
			case 2:
				ip = forge(tmpl, tc.kind, uint64(i+1))
				pl := ip[IPv4UDPSize:]
				pl[int(arg)%len(pl)] = ops[i+3]
				if tc.kind == transport.RoCEv2 {
					rocev2.SealICRC(ip)
				} else {
					wire.Seal(pl, wire.SetupSize)
				}
			case 3:
				p.loop.RunUntil(p.loop.Now() + sim.Time(arg)*100*sim.Microsecond)
				continue
			}
			binary.BigEndian.PutUint32(ip[12:], 0xc6120100+uint32(src))
			binary.BigEndian.PutUint16(ip[10:], 0)
			var sum uint32
			for k := 0; k < 20; k += 2 {
				sum += uint32(binary.BigEndian.Uint16(ip[k:]))
			}
			for sum > 0xffff {
				sum = sum&0xffff + sum>>16
			}
			binary.BigEndian.PutUint16(ip[10:], ^uint16(sum))
			if tc.kind == transport.RoCEv2 {
				rocev2.SealICRC(ip)
			}
			sent = append(sent, ip)
			buf := p.pool.Get(len(ip))
			buf.SetLen(len(ip))
			copy(buf.Data(), ip)
			p.b.Receive(p.loop.Now(), 0, buf)
			if h := p.b.HalfOpen(); h > halfOpenPerListener {
				t.Fatalf("%d half-open on one listener", h)
			}
			for _, s := range p.b.Sources() {
				if s.HalfOpen > halfOpenPerSource || s.HalfOpen < 0 {
					t.Fatalf("source %v has %d half-open", s.Addr, s.HalfOpen)
				}
			}
		}
		p.loop.RunUntil(p.loop.Now() + 100*sim.Second)
		if h := p.b.HalfOpen(); h != 0 {
			t.Errorf("%d half-open left after 100 s", h)
		}
		for _, c := range p.b.Conns() {
			c.Close()
		}
		p.loop.RunUntil(p.loop.Now() + 100*sim.Second)
		if out := p.pool.Outstanding(); out != 0 {
			t.Fatalf("%d buffers leaked", out)
		}
	})
}
