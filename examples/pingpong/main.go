// Command pingpong bounces a message between two hosts of a live mrlab lab
// and reports the one-way latency, perftest-style: with SEND/RECV (the
// default) or with WRITE_IMM into the peer's memory (--op write, as
// ib_write_lat). Every echoed byte is checked.
//
//	sudo mrlab exec h4 -- pingpong --listen
//	sudo mrlab exec h0 -- pingpong --to 198.18.1.1 --size 2 -n 1000 [--op write] [--transport rocev2]
package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"math"
	"net/netip"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"syscall"
	"time"

	"github.com/mrlab/mrlab/verbs"
)

const (
	defaultPort = 18516
	magic       = 0x50504e47
	helloSize   = 40
)

type side struct {
	dev      *verbs.Device
	pd       *verbs.PD
	cq       *verbs.CQ
	qp       *verbs.QP
	ctl      *verbs.MR // handshake messages
	src, dst *verbs.MR // what we send, where the peer's lands
	wc       [8]verbs.WC
	useEvent bool
}

func main() {
	listen := flag.Bool("listen", false, "be the server: echo every message back")
	to := flag.String("to", "", "the server's `ADDR`ess (or ADDR:PORT)")
	port := flag.Uint("port", defaultPort, "port to listen on or connect to")
	size := flag.Int("size", 2, "message size in bytes")
	n := flag.Int("n", 1000, "round trips")
	op := flag.String("op", "send", "send (SEND/RECV) or write (WRITE_IMM, as ib_write_lat)")
	tr := flag.String("transport", "", "metaroce or rocev2 (default: the lab's)")
	useEvent := flag.Bool("use-event", false, "wait for completions in the kernel instead of polling")
	timeout := flag.Duration("timeout", time.Minute, "give up after this long")
	flag.Parse()
	transport, err := verbs.ParseTransport(*tr)
	switch {
	case err != nil:
		usage("--transport: %v", err)
	case *size < 1 || *size > 1<<20:
		usage("--size %d: want 1..1048576", *size)
	case *n < 1:
		usage("-n %d: want at least 1", *n)
	case *op != "send" && *op != "write":
		usage("--op %q: want send or write", *op)
	case *port == 0 || *port > math.MaxUint16:
		usage("--port %d: want 1..65535", *port)
	case *listen == (*to != ""):
		usage("want --listen (server) or --to ADDR (client)")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	if *listen {
		err = serve(ctx, uint16(*port), *useEvent)
	} else {
		var addr netip.AddrPort
		if addr, err = netip.ParseAddrPort(*to); err != nil {
			var a netip.Addr
			if a, err = netip.ParseAddr(*to); err != nil {
				usage("--to %q: want an IPv4 address or ADDR:PORT", *to)
			}
			addr = netip.AddrPortFrom(a, uint16(*port))
		}
		err = ping(ctx, addr, transport, *op == "write", *size, *n, *useEvent)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "pingpong:", err)
		os.Exit(1)
	}
}

func usage(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "pingpong: "+format+"\n", args...)
	flag.Usage()
	os.Exit(2)
}

func open(ctx context.Context, tr verbs.Transport, useEvent bool) (*side, error) {
	dev, err := verbs.Open(ctx)
	if err != nil {
		return nil, err
	}
	s := &side{dev: dev, useEvent: useEvent}
	if s.pd, err = dev.AllocPD(); err != nil {
		return nil, err
	}
	if s.ctl, err = s.pd.AllocMR(4096, verbs.AccessLocalWrite); err != nil {
		return nil, err
	}
	if s.cq, err = dev.CreateCQ(32); err != nil {
		return nil, err
	}
	s.qp, err = dev.CreateQP(verbs.QPConfig{PD: s.pd, SendCQ: s.cq, RecvCQ: s.cq, Transport: tr, MaxSend: 8, MaxRecv: 8})
	return s, err
}

// buffers registers the message buffers once the size is known.
func (s *side) buffers(size int) (err error) {
	if s.src, err = s.pd.AllocMR(size, verbs.AccessLocalWrite); err != nil {
		return err
	}
	s.dst, err = s.pd.AllocMR(size, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	return err
}

// recv waits for the next receive completion; send completions and
// their errors are checked on the way.
func (s *side) recv(ctx context.Context) (verbs.WC, error) {
	for {
		k := s.cq.Poll(s.wc[:1])
		if k == 1 {
			wc := s.wc[0]
			if wc.Status != verbs.StatusSuccess {
				return wc, fmt.Errorf("%v completed with %v", wc.Op, wc.Status)
			}
			if wc.Op == verbs.OpRecv || wc.Op == verbs.OpRecvImm {
				return wc, nil
			}
			continue
		}
		if ctx.Err() != nil {
			return verbs.WC{}, ctx.Err()
		}
		if err := s.dev.Err(); err != nil {
			return verbs.WC{}, err // the lab stopped: Poll alone would spin forever
		}
		if s.useEvent {
			if err := s.cq.Wait(ctx); err != nil {
				return verbs.WC{}, err
			}
		} else {
			runtime.Gosched()
		}
	}
}

// postRecv posts a receive into dst (SEND mode) or an empty one (a
// WRITE_IMM's notification).
func (s *side) postRecv(write bool) error {
	wr := verbs.RecvWR{ID: 1}
	if !write {
		wr.SGL = []verbs.SGE{s.dst.SGE(0, s.dst.Len())}
	}
	return s.qp.PostRecv(wr)
}

// bounce sends src (SEND) or writes it into the peer's dst (WRITE_IMM).
func (s *side) bounce(i int, write bool, raddr uint64, rkey uint32) error {
	wr := verbs.SendWR{ID: uint64(i), Op: verbs.OpSend, SGL: []verbs.SGE{s.src.SGE(0, s.src.Len())}}
	if write {
		wr.Op, wr.Imm, wr.RemoteAddr, wr.RKey = verbs.OpWriteImm, uint32(i), raddr, rkey
	}
	return s.qp.PostSend(wr)
}

// hello is the handshake: [magic, write, size, n, addr, rkey].
func putHello(b []byte, write bool, size, n int, mr *verbs.MR) {
	binary.LittleEndian.PutUint32(b, magic)
	w := uint32(0)
	if write {
		w = 1
	}
	binary.LittleEndian.PutUint32(b[4:], w)
	binary.LittleEndian.PutUint64(b[8:], uint64(size))
	binary.LittleEndian.PutUint64(b[16:], uint64(n))
	if mr != nil {
		binary.LittleEndian.PutUint64(b[24:], mr.Addr())
		binary.LittleEndian.PutUint32(b[32:], mr.RKey())
	}
}

func serve(ctx context.Context, port uint16, useEvent bool) error {
	s, err := open(ctx, verbs.TransportDefault, useEvent)
	if err != nil {
		return err
	}
	defer s.dev.Close()
	if err := s.qp.PostRecv(verbs.RecvWR{SGL: []verbs.SGE{s.ctl.SGE(0, helloSize)}}); err != nil {
		return err
	}
	ln, err := s.dev.Listen(s.pd, port, 1)
	if err != nil {
		return err
	}
	fmt.Printf("pingpong: %s (%v) listening on port %d\n", s.dev.Host(), s.dev.Addr(), port)
	if err := ln.Accept(ctx, s.qp); err != nil {
		return err
	}
	if _, err := s.recv(ctx); err != nil {
		return err
	}
	h := s.ctl.Bytes()
	write, size, n := binary.LittleEndian.Uint32(h[4:]) == 1, int(binary.LittleEndian.Uint64(h[8:])), int(binary.LittleEndian.Uint64(h[16:]))
	raddr, rkey := binary.LittleEndian.Uint64(h[24:]), binary.LittleEndian.Uint32(h[32:])
	if binary.LittleEndian.Uint32(h) != magic || size < 1 || size > 1<<20 {
		return fmt.Errorf("bad hello from %v", s.qp.Remote())
	}
	if err := s.buffers(size); err != nil {
		return err
	}
	for i := 0; i < 2; i++ {
		if err := s.postRecv(write); err != nil {
			return err
		}
	}
	putHello(s.ctl.Bytes()[64:], write, size, n, s.dst)
	if err := s.qp.PostSend(verbs.SendWR{Op: verbs.OpSend, SGL: []verbs.SGE{s.ctl.SGE(64, helloSize)}}); err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		if _, err := s.recv(ctx); err != nil {
			return fmt.Errorf("round trip %d: %w", i, err)
		}
		if err := s.postRecv(write); err != nil {
			return err
		}
		// Echo: the bytes that landed go back from our own memory.
		copy(s.src.Bytes(), s.dst.Bytes())
		if err := s.bounce(i, write, raddr, rkey); err != nil {
			return err
		}
	}
	for i := 0; i < 100 && s.qp.State() == verbs.QPEstablished; i++ {
		s.cq.Poll(s.wc[:]) // the last echo's completion
		time.Sleep(time.Millisecond)
	}
	fmt.Printf("pingpong: echoed %d messages of %d bytes to %v\n", n, size, s.qp.Remote().Addr())
	return nil
}

func ping(ctx context.Context, to netip.AddrPort, tr verbs.Transport, write bool, size, n int, useEvent bool) error {
	s, err := open(ctx, tr, useEvent)
	if err != nil {
		return err
	}
	defer s.dev.Close()
	if err := s.buffers(size); err != nil {
		return err
	}
	if err := s.qp.PostRecv(verbs.RecvWR{SGL: []verbs.SGE{s.ctl.SGE(64, helloSize)}}); err != nil {
		return err
	}
	for i := 0; i < 2; i++ {
		if err := s.postRecv(write); err != nil {
			return err
		}
	}
	if err := s.qp.Connect(ctx, to); err != nil {
		return err
	}
	putHello(s.ctl.Bytes(), write, size, n, s.dst)
	if err := s.qp.PostSend(verbs.SendWR{Op: verbs.OpSend, SGL: []verbs.SGE{s.ctl.SGE(0, helloSize)}}); err != nil {
		return err
	}
	// The server's hello is the first receive to complete (receives
	// complete in order).
	if _, err := s.recv(ctx); err != nil {
		return err
	}
	h := s.ctl.Bytes()[64:]
	raddr, rkey := binary.LittleEndian.Uint64(h[24:]), binary.LittleEndian.Uint32(h[32:])
	lat := make([]time.Duration, 0, n)
	sw, err := s.dev.StartTiming() // did the lab keep real time while we measured?
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		pattern(s.src.Bytes(), i)
		t0 := time.Now()
		if err := s.bounce(i, write, raddr, rkey); err != nil {
			return err
		}
		wc, err := s.recv(ctx)
		if err != nil {
			return fmt.Errorf("round trip %d: %w", i, err)
		}
		lat = append(lat, time.Since(t0)/2)
		if err := s.postRecv(write); err != nil {
			return err
		}
		if (write && (wc.Op != verbs.OpRecvImm || wc.Imm != uint32(i))) || int(wc.Bytes) != size {
			return fmt.Errorf("round trip %d: %v of %d bytes (imm %d)", i, wc.Op, wc.Bytes, wc.Imm)
		}
		if !checkPattern(s.dst.Bytes(), i) {
			return fmt.Errorf("round trip %d: the echo differs from what was sent", i)
		}
	}
	timing, err := sw.Stop()
	if err != nil {
		return err
	}
	report(s, to, tr, write, size, lat, timing)
	return nil
}

func pattern(b []byte, i int) {
	for j := range b {
		b[j] = byte(i*131 + j*7 + 1)
	}
}

func checkPattern(b []byte, i int) bool {
	for j := range b {
		if b[j] != byte(i*131+j*7+1) {
			return false
		}
	}
	return true
}

func report(s *side, to netip.AddrPort, tr verbs.Transport, write bool, size int, lat []time.Duration, timing verbs.Timing) {
	const rule = "---------------------------------------------------------------------------------------"
	sorted := slices.Clone(lat)
	slices.Sort(sorted)
	us := func(d time.Duration) float64 { return float64(d) / 1e3 }
	var sum, sq float64
	for _, d := range lat {
		sum += us(d)
	}
	mean := sum / float64(len(lat))
	for _, d := range lat {
		sq += (us(d) - mean) * (us(d) - mean)
	}
	pct := func(p float64) time.Duration { return sorted[min(len(sorted)-1, int(p*float64(len(sorted))))] }
	title, trName := "Send Latency Test", tr.String()
	if write {
		title = "RDMA_Write Latency Test"
	}
	if tr == verbs.TransportDefault {
		trName = "lab default"
	}
	st := s.dev.Stats()
	fmt.Println(rule)
	fmt.Printf("                    %s\n", title)
	fmt.Printf(" Transport       : %-14s Local          : %s %v\n", trName, s.dev.Host(), s.dev.Addr())
	fmt.Printf(" Remote          : %-14v Doorbells/waits: %d / %d (for %d work requests)\n", to, st.Doorbells, st.Waits, st.Posted)
	fmt.Println(rule)
	fmt.Println(" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec]")
	fmt.Printf(" %-6d %-13d %-14.2f %-12.2f %-18.2f %-16.2f %-15.2f %-23.2f %.2f\n", size, len(lat), us(sorted[0]), us(sorted[len(sorted)-1]),
		us(pct(0.5)), mean, math.Sqrt(sq/float64(len(lat))), us(pct(0.99)), us(pct(0.999)))
	fmt.Println(rule)
	fmt.Println(timing)
	fmt.Printf("data verified: %d round trips, every echoed byte checked\n", len(lat))
}
