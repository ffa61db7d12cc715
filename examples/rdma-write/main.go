// Command rdma-write moves data between two hosts of a live mrlab lab with
// RDMA WRITEs, straight from the client's memory into the server's, and
// checks every byte. It is a copyable verbs program: the server listens,
// tells the client where to write, and checks each message as it lands;
// the client writes messages into a ring of slots in the server's memory,
// reusing a slot once the server returned its credit.
//
//	sudo mrlab up
//	sudo mrlab exec h4 -- rdma-write --listen
//	sudo mrlab exec h0 -- rdma-write --to 198.18.1.1 --size 1MiB -n 64 [--transport rocev2]
//
// The client says when it is connected, then prints a perftest-style line
// and "data verified", and exits 0 only when the server has checked every
// byte of every message.
package main

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"math"
	"net/netip"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mrlab/mrlab/verbs"
)

const (
	defaultPort = 18515 // perftest's
	magic       = 0x52574558
	creditBad   = 1 << 31 // a credit whose message did not check out
)

type config struct {
	listen    bool
	to        netip.AddrPort
	size      int
	n         int
	depth     int
	transport verbs.Transport
	useEvent  bool
	seed      uint64
	timeout   time.Duration
}

func main() {
	var cfg config
	var to, size, tr string
	var port uint
	flag.BoolVar(&cfg.listen, "listen", false, "be the server: wait for one client and check what it writes")
	flag.StringVar(&to, "to", "", "the server's `ADDR`ess (or ADDR:PORT)")
	flag.UintVar(&port, "port", defaultPort, "port to listen on or connect to")
	flag.StringVar(&size, "size", "1MiB", "message `SIZE` (bytes, or with KiB, MiB, GiB)")
	flag.IntVar(&cfg.n, "n", 64, "messages to write")
	flag.IntVar(&cfg.depth, "depth", 16, "messages in flight (and slots at the server)")
	flag.StringVar(&tr, "transport", "", "metaroce or rocev2 (default: the lab's)")
	flag.BoolVar(&cfg.useEvent, "use-event", false, "wait for completions in the kernel instead of polling")
	flag.Uint64Var(&cfg.seed, "seed", 1, "seed of the data pattern")
	flag.DurationVar(&cfg.timeout, "timeout", time.Minute, "give up after this long")
	flag.Parse()
	var err error
	if cfg.size, err = parseSize(size); err != nil {
		usage("--size: %v", err)
	}
	if cfg.transport, err = verbs.ParseTransport(tr); err != nil {
		usage("--transport: %v", err)
	}
	if port == 0 || port > math.MaxUint16 {
		usage("--port %d: want 1..65535", port)
	}
	if cfg.n < 1 || cfg.depth < 1 || cfg.depth > 1024 {
		usage("-n %d --depth %d: want n >= 1 and depth 1..1024", cfg.n, cfg.depth)
	}
	switch {
	case cfg.listen && to != "":
		usage("--listen and --to: pick one")
	case !cfg.listen && to == "":
		usage("want --listen (server) or --to ADDR (client)")
	case !cfg.listen:
		if cfg.to, err = parseAddr(to, uint16(port)); err != nil {
			usage("--to: %v", err)
		}
	default:
		cfg.to = netip.AddrPortFrom(netip.IPv4Unspecified(), uint16(port))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	if cfg.listen {
		err = serve(ctx, &cfg)
	} else {
		err = write(ctx, &cfg)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "rdma-write:", err)
		os.Exit(1)
	}
}

func usage(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "rdma-write: "+format+"\n", args...)
	flag.Usage()
	os.Exit(2)
}

// endpoint is one side's verbs objects.
type endpoint struct {
	dev *verbs.Device
	pd  *verbs.PD
	cq  *verbs.CQ
	qp  *verbs.QP
	ctl *verbs.MR // small messages: hello, ready
	buf *verbs.MR // the data: depth slots of size bytes
	wc  [32]verbs.WC
	use bool // --use-event
}

func open(ctx context.Context, cfg *config, slots int) (*endpoint, error) {
	dev, err := verbs.Open(ctx)
	if err != nil {
		return nil, err
	}
	e := &endpoint{dev: dev, use: cfg.useEvent}
	if e.pd, err = dev.AllocPD(); err != nil {
		return nil, err
	}
	if e.ctl, err = e.pd.AllocMR(4096, verbs.AccessLocalWrite); err != nil {
		return nil, err
	}
	if e.cq, err = dev.CreateCQ(4*slots + 8); err != nil {
		return nil, err
	}
	e.qp, err = dev.CreateQP(verbs.QPConfig{PD: e.pd, SendCQ: e.cq, RecvCQ: e.cq, Transport: cfg.transport,
		MaxSend: slots + 1, MaxRecv: slots + 1})
	return e, err
}

// next returns the next completion, failing on an error status.
func (e *endpoint) next(ctx context.Context) (verbs.WC, error) {
	for {
		if n := e.cq.Poll(e.wc[:1]); n == 1 {
			if e.wc[0].Status != verbs.StatusSuccess {
				return e.wc[0], fmt.Errorf("%v (work request %d) completed with %v", e.wc[0].Op, e.wc[0].ID, e.wc[0].Status)
			}
			return e.wc[0], nil
		}
		if ctx.Err() != nil {
			return verbs.WC{}, ctx.Err()
		}
		if err := e.dev.Err(); err != nil {
			return verbs.WC{}, err // the lab stopped: Poll alone would spin forever
		}
		if e.use {
			if err := e.cq.Wait(ctx); err != nil {
				return verbs.WC{}, err
			}
		} else {
			runtime.Gosched()
		}
	}
}

// serve accepts one client, tells it where to write, and checks each
// message as its WRITE_IMM lands, returning a credit for it.
func serve(ctx context.Context, cfg *config) error {
	e, err := open(ctx, cfg, 1024)
	if err != nil {
		return err
	}
	defer e.dev.Close()
	if err := e.qp.PostRecv(verbs.RecvWR{ID: 0, SGL: []verbs.SGE{e.ctl.SGE(0, 32)}}); err != nil {
		return err
	}
	ln, err := e.dev.Listen(e.pd, cfg.to.Port(), 1)
	if err != nil {
		return err
	}
	fmt.Printf("rdma-write: %s (%v) listening on port %d\n", e.dev.Host(), e.dev.Addr(), cfg.to.Port())
	if err := ln.Accept(ctx, e.qp); err != nil {
		return err
	}
	peer := e.qp.Remote().Addr()
	wc, err := e.next(ctx)
	if err != nil {
		return err
	}
	hello := e.ctl.Bytes()
	if wc.Op != verbs.OpRecv || wc.Bytes != 32 || binary.LittleEndian.Uint32(hello) != magic {
		return fmt.Errorf("client %v did not start with a hello (%v of %d bytes)", peer, wc.Op, wc.Bytes)
	}
	slots := int(binary.LittleEndian.Uint32(hello[4:]))
	size, n, seed := binary.LittleEndian.Uint64(hello[8:]), binary.LittleEndian.Uint64(hello[16:]), binary.LittleEndian.Uint64(hello[24:])
	if slots < 1 || slots > 1024 || size < 1 || size > 1<<30 || uint64(slots)*size > 4<<30 {
		return fmt.Errorf("client %v asks for %d slots of %d bytes", peer, slots, size)
	}
	if e.buf, err = e.pd.AllocMR(slots*int(size), verbs.AccessLocalWrite|verbs.AccessRemoteWrite); err != nil {
		return err
	}
	for i := 0; i < slots; i++ {
		if err := e.qp.PostRecv(verbs.RecvWR{ID: uint64(i)}); err != nil { // WRITE_IMM notifications
			return err
		}
	}
	ready := e.ctl.Bytes()[64:]
	binary.LittleEndian.PutUint64(ready, e.buf.Addr())
	binary.LittleEndian.PutUint32(ready[8:], e.buf.RKey())
	binary.LittleEndian.PutUint32(ready[12:], uint32(slots))
	if err := e.qp.PostSend(verbs.SendWR{ID: 1 << 40, Op: verbs.OpSend, SGL: []verbs.SGE{e.ctl.SGE(64, 16)}}); err != nil {
		return err
	}
	var checked uint64
	sending := 1 // the ready message
	for checked < n || sending > 0 {
		wc, err := e.next(ctx)
		if err != nil {
			return fmt.Errorf("after %d messages from %v: %w", checked, peer, err)
		}
		if wc.Op != verbs.OpRecvImm {
			sending-- // one of our sends completed
			continue
		}
		msg := uint64(wc.Imm)
		slot := int(msg % uint64(slots))
		data := e.buf.Bytes()[slot*int(size) : (slot+1)*int(size)]
		credit := uint32(msg)
		bad := msg != checked || wc.Bytes != uint32(size)
		if !bad {
			if off := check(data, seed, msg); off >= 0 {
				fmt.Fprintf(os.Stderr, "rdma-write: message %d from %v differs at byte %d\n", msg, peer, off)
				bad = true
			}
		}
		if bad {
			credit |= creditBad
		}
		checked++
		if err := e.qp.PostRecv(verbs.RecvWR{ID: uint64(slot)}); err != nil {
			return err
		}
		if err := e.qp.PostSend(verbs.SendWR{ID: msg, Op: verbs.OpSendImm, Imm: credit}); err != nil {
			return err
		}
		sending++
		if bad {
			return fmt.Errorf("message %d (of %d bytes) from %v did not check out", msg, wc.Bytes, peer)
		}
	}
	fmt.Printf("rdma-write: %d messages of %d bytes from %v: data verified (every byte checked)\n", n, size, peer)
	return nil
}

// write connects, learns where to write, and writes n messages through a
// window of depth slots, refilling each message's source with its
// pattern before posting it.
func write(ctx context.Context, cfg *config) error {
	slots := min(cfg.depth, cfg.n)
	e, err := open(ctx, cfg, slots)
	if err != nil {
		return err
	}
	defer e.dev.Close()
	if e.buf, err = e.pd.AllocMR(slots*cfg.size, verbs.AccessLocalWrite); err != nil {
		return err
	}
	raddr, rkey, err := connectWriter(ctx, e, cfg, slots)
	if err != nil {
		return err
	}
	n := uint64(cfg.n)
	sent := make([]time.Time, 0, n) // when message i was posted
	done := make([]time.Time, 0, n) // when message i's WRITE completed
	// The lab paces an emulated network to the wall clock; the stopwatch
	// says whether it kept up while we measured.
	sw, err := e.dev.StartTiming()
	if err != nil {
		return err
	}
	start := time.Now()
	if err := transfer(ctx, e, cfg, slots, raddr, rkey, &sent, &done); err != nil {
		return err
	}
	timing, err := sw.Stop()
	if err != nil {
		return err
	}
	report(e, cfg, start, sent, done, timing)
	return nil
}

// connectWriter connects to the server, says hello (slots, size, count
// and the pattern's seed) and returns the address and key of the
// server's slots from its ready message.
func connectWriter(ctx context.Context, e *endpoint, cfg *config, slots int) (raddr uint64, rkey uint32, err error) {
	// Receives for the server's ready message and its credits, in place
	// before the connection exists.
	for i := 0; i <= slots; i++ {
		if err := e.qp.PostRecv(verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{e.ctl.SGE(64, 16)}}); err != nil {
			return 0, 0, err
		}
	}
	if err := e.qp.Connect(ctx, cfg.to); err != nil {
		return 0, 0, err
	}
	// Said before the transfer (perftest prints its local and remote
	// addresses first too), so a script can wait for it.
	fmt.Printf("rdma-write: %s (%v) connected to %v over %v: %d messages of %d bytes\n",
		e.dev.Host(), e.dev.Addr(), cfg.to, e.qp.Transport(), cfg.n, cfg.size)
	hello := e.ctl.Bytes()
	binary.LittleEndian.PutUint32(hello, magic)
	binary.LittleEndian.PutUint32(hello[4:], uint32(slots))
	binary.LittleEndian.PutUint64(hello[8:], uint64(cfg.size))
	binary.LittleEndian.PutUint64(hello[16:], uint64(cfg.n))
	binary.LittleEndian.PutUint64(hello[24:], cfg.seed)
	if err := e.qp.PostSend(verbs.SendWR{ID: 1 << 40, Op: verbs.OpSend, SGL: []verbs.SGE{e.ctl.SGE(0, 32)}}); err != nil {
		return 0, 0, err
	}
	for raddr == 0 {
		wc, err := e.next(ctx)
		if err != nil {
			return 0, 0, err
		}
		if wc.Op == verbs.OpRecv {
			ready := e.ctl.Bytes()[64:]
			raddr, rkey = binary.LittleEndian.Uint64(ready), binary.LittleEndian.Uint32(ready[8:])
			if int(binary.LittleEndian.Uint32(ready[12:])) != slots {
				return 0, 0, fmt.Errorf("the server made %d slots, not %d", binary.LittleEndian.Uint32(ready[12:]), slots)
			}
		}
	}
	if err := e.qp.PostRecv(verbs.RecvWR{ID: uint64(slots) + 1, SGL: []verbs.SGE{e.ctl.SGE(64, 16)}}); err != nil {
		return 0, 0, err
	}
	return raddr, rkey, nil
}

// transfer writes cfg.n messages to the server's slots at raddr, a slot
// reused only once the server has credited (checked) its previous
// message; it appends each message's post and completion times to sent
// and done.
func transfer(ctx context.Context, e *endpoint, cfg *config, slots int, raddr uint64, rkey uint32, sent, done *[]time.Time) error {
	size := cfg.size
	n := uint64(cfg.n)
	var posted, written, credited uint64
	for credited < n {
		// Post while a slot is free: its previous message was checked.
		for posted < n && posted < credited+uint64(slots) {
			slot := int(posted % uint64(slots))
			fill(e.buf.Bytes()[slot*size:(slot+1)*size], cfg.seed, posted)
			err := e.qp.PostSend(verbs.SendWR{ID: posted, Op: verbs.OpWriteImm, Imm: uint32(posted),
				SGL: []verbs.SGE{e.buf.SGE(slot*size, size)}, RemoteAddr: raddr + uint64(slot*size), RKey: rkey})
			if errors.Is(err, verbs.ErrQueueFull) {
				break
			}
			if err != nil {
				return err
			}
			*sent = append(*sent, time.Now())
			posted++
		}
		wc, err := e.next(ctx)
		if err != nil {
			return fmt.Errorf("after %d of %d messages: %w", written, n, err)
		}
		switch wc.Op {
		case verbs.OpWriteImm:
			written++
			*done = append(*done, time.Now())
		case verbs.OpRecvImm:
			if wc.Imm&creditBad != 0 {
				return fmt.Errorf("the server found message %d corrupted", wc.Imm&^creditBad)
			}
			if uint64(wc.Imm) != credited {
				return fmt.Errorf("credit for message %d, expected %d", wc.Imm, credited)
			}
			credited++
			if err := e.qp.PostRecv(verbs.RecvWR{ID: credited, SGL: []verbs.SGE{e.ctl.SGE(64, 16)}}); err != nil {
				return err
			}
		}
	}
	return nil
}

// report prints the perftest-style result.
func report(e *endpoint, cfg *config, start time.Time, sent, done []time.Time, timing verbs.Timing) {
	const rule = "---------------------------------------------------------------------------------------"
	elapsed := done[len(done)-1].Sub(start)
	avg := float64(cfg.size) * 8 * float64(len(done)) / elapsed.Seconds() / 1e9
	peak := max(avg, peakGbps(sent, done, cfg.size, cfg.depth))
	st := e.dev.Stats()
	fmt.Println(rule)
	fmt.Println("                    RDMA_Write BW Test")
	fmt.Printf(" Transport       : %-14v Local          : %s %v\n", transportName(cfg.transport), e.dev.Host(), e.dev.Addr())
	fmt.Printf(" TX depth        : %-14d Remote         : %v\n", min(cfg.depth, cfg.n), cfg.to)
	fmt.Printf(" Completions     : %-14s Doorbells/waits: %d / %d (for %d work requests)\n",
		map[bool]string{true: "events", false: "polling"}[cfg.useEvent], st.Doorbells, st.Waits, st.Posted)
	fmt.Println(rule)
	fmt.Println(" #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]")
	fmt.Printf(" %-10d %-14d %-18.2f %-20.2f %.6f\n", cfg.size, len(done), peak, avg, float64(len(done))/elapsed.Seconds()/1e6)
	fmt.Println(rule)
	fmt.Println(timing)
	fmt.Printf("data verified: %d messages, %d bytes, every byte checked by the server\n", len(done), len(done)*cfg.size)
}

func transportName(t verbs.Transport) string {
	if t == verbs.TransportDefault {
		return "lab default"
	}
	return t.String()
}

// fill writes message msg's pattern: xorshift64 words seeded by (seed,
// msg), so the server can check every byte without a copy of the data.
func fill(b []byte, seed, msg uint64) {
	x := start(seed, msg)
	i := 0
	for ; i+8 <= len(b); i += 8 {
		x = xorshift(x)
		binary.LittleEndian.PutUint64(b[i:], x)
	}
	if i < len(b) {
		var t [8]byte
		binary.LittleEndian.PutUint64(t[:], xorshift(x))
		copy(b[i:], t[:])
	}
}

// check returns the offset of the first byte of b that is not message
// msg's pattern, or -1.
func check(b []byte, seed, msg uint64) int {
	x := start(seed, msg)
	i := 0
	for ; i+8 <= len(b); i += 8 {
		x = xorshift(x)
		if binary.LittleEndian.Uint64(b[i:]) != x {
			for j := 0; j < 8; j++ {
				if b[i+j] != byte(x>>(8*j)) {
					return i + j
				}
			}
		}
	}
	if i < len(b) {
		var t [8]byte
		binary.LittleEndian.PutUint64(t[:], xorshift(x))
		for j := range b[i:] {
			if b[i+j] != t[j] {
				return i + j
			}
		}
	}
	return -1
}

func start(seed, msg uint64) uint64 {
	return (seed*0x9e3779b97f4a7c15 ^ (msg+1)*0xbf58476d1ce4e5b9) | 1
}

func xorshift(x uint64) uint64 {
	x ^= x << 13
	x ^= x >> 7
	x ^= x << 17
	return x
}

// parseSize reads 4096, 64K, 64KiB, 1MiB, 1GiB: the same grammar as mrlab's
// (labs.ParseSize: K, KB and KiB all 1024, as tc reads sizes), kept here
// so the example builds alone; TestParseSizeMatchesLabs keeps them one.
func parseSize(s string) (int, error) {
	t := strings.TrimSpace(s)
	mult := 1
	for _, u := range []struct {
		suffix string
		m      int
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1 << 10}, {"MB", 1 << 20}, {"GB", 1 << 30},
		{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"B", 1}} {
		if num, ok := strings.CutSuffix(strings.ToLower(t), strings.ToLower(u.suffix)); ok {
			t, mult = num, u.m
			break
		}
	}
	v, err := strconv.Atoi(strings.TrimSpace(t))
	if err != nil || v < 1 || v > (1<<30)/mult {
		return 0, fmt.Errorf("%q: want a size of 1 byte to 1GiB, such as 4096, 64KiB or 1MiB", s)
	}
	return v * mult, nil
}

// parseAddr reads ADDR or ADDR:PORT.
func parseAddr(s string, port uint16) (netip.AddrPort, error) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is4() {
		return netip.AddrPort{}, fmt.Errorf("%q: want an IPv4 address such as 198.18.1.1, or ADDR:PORT", s)
	}
	return netip.AddrPortFrom(a, port), nil
}

// peakGbps is perftest's BW peak: the best rate over windows of depth
// messages in a row, each window opening when its first message is posted
// (sent) and closing when its last completes (done, in post order). Every
// byte counted crossed the wire inside its window, so the peak never
// exceeds the line rate however completions bunch; a window between two
// completions would.
func peakGbps(sent, done []time.Time, size, depth int) float64 {
	n := min(len(sent), len(done))
	w := min(depth, n)
	peak := 0.0
	for j := w - 1; w > 0 && j < n; j++ {
		if d := done[j].Sub(sent[j-w+1]); d > 0 {
			peak = max(peak, float64(size)*8*float64(w)/d.Seconds()/1e9)
		}
	}
	return peak
}
