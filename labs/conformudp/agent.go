package conformudp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport/metaroce/conformance"
)

// Agent runs mrlab's engine as an IUT for the udp target: MetaRoCE over a
// real UDP socket, its application side driven by the control channel.
// The engine's clock is the wall clock slowed by the dilation the tester
// asks for in reset. One tester at a time.
type Agent struct {
	// Port is the MetaRoCE UDP port, for receiving and as the peer's
	// destination port (DefaultUDPPort).
	Port uint16
	// Addr is the address to bind (default: any).
	Addr netip.Addr
	// InNS, when set, runs socket creation (a test's namespace).
	InNS func(func() error) error
	// Logf, when set, gets one line per test served.
	Logf func(format string, args ...any)
}

func (a *Agent) bind() netip.Addr {
	if a.Addr.IsValid() {
		return a.Addr
	}
	return netip.IPv4Unspecified()
}

// Serve answers control connections on ln until ctx ends.
func (a *Agent) Serve(ctx context.Context, ln net.Listener) error {
	port := a.Port
	if port == 0 {
		port = DefaultUDPPort
	}
	var rx *net.UDPConn
	err := inNS(a.InNS, func() error {
		var err error
		rx, err = listenUDP(netip.AddrPortFrom(a.bind(), port))
		return err
	})
	if err != nil {
		return err
	}
	defer rx.Close()
	s := &agentSession{a: a, port: port}
	go s.read(rx)
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("conformance agent: accepting: %w", err)
		}
		s.serve(c)
	}
}

// agentSession holds the IUT of the test being served.
type agentSession struct {
	a    *Agent
	port uint16
	mu   sync.Mutex
	e    *conformance.Engine
	tx   *sockets
	peer netip.Addr
	dil  float64
	t0   time.Time
	wake chan struct{}
	stop chan struct{}
}

// vnow is the engine's clock: wall time since reset over the dilation.
func (s *agentSession) vnow() sim.Time { return sim.Time(float64(time.Since(s.t0)) / s.dil) }

// catchUp runs the engine up to now. The caller holds mu.
func (s *agentSession) catchUp() {
	if s.e != nil {
		s.e.RunUntil(s.vnow())
	}
}

func (s *agentSession) read(rx *net.UDPConn) {
	buf := make([]byte, 65536)
	oob := make([]byte, 128)
	for {
		n, from, tos, err := readTOS(rx, buf, oob)
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.e != nil && from.Addr() == s.peer {
			s.catchUp()
			_ = s.e.Inject(buf[:n], conformance.InMeta{SrcPort: from.Port(), CE: tos&3 == ecnCE})

			s.poke()
		}
		s.mu.Unlock()
	}
}

func (s *agentSession) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// drive fires engine e's timers on the wall clock until stop closes.
func (s *agentSession) drive(e *conformance.Engine, stop, wake chan struct{}) {
	for {
		s.mu.Lock()
		if s.e != e {
			s.mu.Unlock()
			return // a reset replaced it
		}
		s.catchUp()
		next := e.Next()
		d := time.Hour
		if next != sim.Never {
			d = time.Until(s.t0.Add(time.Duration(float64(next) * s.dil)))
		}
		s.mu.Unlock()
		t := time.NewTimer(max(d, 0))
		select {
		case <-stop:
			t.Stop()
			return
		case <-wake:
		case <-t.C:
		}
		t.Stop()
	}
}

// serve answers one tester's requests.
func (s *agentSession) serve(c net.Conn) {
	defer c.Close()
	peer, _ := netip.ParseAddrPort(c.RemoteAddr().String())
	r := bufio.NewScanner(c)
	for r.Scan() {
		words := strings.Fields(r.Text())
		if len(words) == 0 {
			continue
		}
		val, err := s.request(peer.Addr().Unmap(), words)
		if err != nil {
			fmt.Fprintf(c, "err %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
			continue
		}
		if val == "" {
			fmt.Fprintf(c, "ok\n")
		} else {
			fmt.Fprintf(c, "ok %s\n", val)
		}
	}
	s.end()
}

// end stops the current IUT, if any.
func (s *agentSession) end() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stop != nil {
		close(s.stop)
		s.stop = nil
	}
	if s.tx != nil {
		s.tx.close()
	}
	s.e, s.tx = nil, nil
}

func (s *agentSession) request(peer netip.Addr, words []string) (string, error) {
	if words[0] == "reset" {
		return "", s.reset(peer, words[1:])
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.e == nil {
		return "", errors.New("no IUT: reset first")
	}
	s.catchUp()
	v, err := conformance.ServeControl(s.e, words)
	s.poke()
	return v, err
}

func (s *agentSession) reset(peer netip.Addr, words []string) error {
	args, err := conformance.ParseArgs(words)
	if err != nil {
		return err
	}
	dil := float64(max(args["dilation"], 1))
	delete(args, "dilation")
	// The engine exists before it runs, so tx is set before anything is sent.
	var tx *sockets
	e, err := conformance.NewAgentEngine(args, s.port, uint64(time.Now().UnixNano()), func(p conformance.Sent) {
		ecn := uint8(ecnNotECT)
		if p.ECT {
			ecn = ecnECT0
		}
		if err := tx.send(p.SrcPort, ecn, p.Bytes); err != nil && s.a.Logf != nil {
			s.a.Logf("conformance agent: %v", err)
		}
	})
	if err != nil {
		return err
	}
	s.end()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.peer, s.dil, s.t0 = peer, dil, time.Now()
	tx = newSockets(s.a.InNS, s.a.bind(), netip.AddrPortFrom(peer, s.port))
	s.tx, s.e = tx, e
	s.stop, s.wake = make(chan struct{}), make(chan struct{}, 1)
	go s.drive(s.e, s.stop, s.wake)
	if s.a.Logf != nil {
		s.a.Logf("conformance agent: fresh IUT for %v (dilation %g)", peer, dil)
	}
	return nil
}
