package conformudp

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mrlab/mrlab/transport/metaroce/conformance"
)

// DefaultSlack is the udp target's default Slack.
const DefaultSlack = 10 * time.Millisecond

// DefaultUDPPort is the MetaRoCE UDP port the udp target and the agent
// use by default. It is not wire.UDPPort (4796) so that in a live lab,
// whose NICs take 4796 for themselves, the packets reach the hosts'
// kernels, where the tester and the IUT run.
const DefaultUDPPort = 4798

// ParseTarget reads a --target value: "sim" or "udp:ADDR[:PORT]".
func ParseTarget(s string) (conformance.Target, error) {
	if s == "" || s == "sim" {
		return conformance.SimTarget{}, nil
	}
	rest, ok := strings.CutPrefix(s, "udp:")
	if !ok {
		return nil, fmt.Errorf("target %q: want sim or udp:ADDR[:PORT]", s)
	}
	ap, err := netip.ParseAddrPort(rest)
	if err != nil {
		a, err2 := netip.ParseAddr(rest)
		if err2 != nil || !a.Is4() {
			return nil, fmt.Errorf("target %q: want an IPv4 address with an optional port", s)
		}
		ap = netip.AddrPortFrom(a, DefaultUDPPort)
	}
	if !ap.Addr().Is4() || ap.Port() == 0 {
		return nil, fmt.Errorf("target %q: want an IPv4 address and a nonzero port", s)
	}
	return &UDPTarget{Addr: ap, Dilation: 1}, nil
}

// UDPTarget exchanges real UDP packets with an IUT at Addr and drives its
// application side over the control channel (control.go).
type UDPTarget struct {
	Addr netip.AddrPort
	// Control is the control channel's host:port (default Addr's host,
	// ControlPort).
	Control string
	// Dilation slows the scripts' clock: one script microsecond lasts
	// Dilation wall microseconds. The IUT must run its clock as slowly
	// (the agent does when told in reset); an implementation that cannot
	// runs at 1.
	Dilation float64
	// Slack is added to every expectation's window, in wall time: the
	// latency of the network and of a loaded machine (DefaultSlack).
	Slack time.Duration
	// Local is the tester's address to bind (default: any).
	Local netip.Addr
	// InNS, when set, runs socket creation (a test's namespace).
	InNS func(func() error) error
}

func (t *UDPTarget) local() netip.Addr {
	if t.Local.IsValid() {
		return t.Local
	}
	return netip.IPv4Unspecified()
}

// Name returns udp:ADDR:PORT.
func (t *UDPTarget) Name() string { return "udp:" + t.Addr.String() }

func (t *UDPTarget) controlAddr() string {
	if t.Control != "" {
		return t.Control
	}
	return net.JoinHostPort(t.Addr.Addr().String(), strconv.Itoa(conformance.ControlPort))
}

// Open resets the IUT over the control channel and opens the tester's
// sockets: one to receive on the MetaRoCE port, one per source port it
// sends from.
func (t *UDPTarget) Open(settings map[string]uint64) (conformance.IUT, error) {
	dil := t.Dilation
	if dil < 1 {
		dil = 1
	}
	u := &udpIUT{t: t, dil: dil, ch: make(chan conformance.Sent, 4096), tx: newSockets(t.InNS, t.local(), t.Addr)}
	var err error
	err = inNS(t.InNS, func() error {
		u.ctl, err = dialControl(t.Local, t.controlAddr())
		if err != nil {
			return err
		}
		u.rx, err = listenUDP(netip.AddrPortFrom(t.local(), t.Addr.Port()))
		return err
	})
	if err != nil {
		u.Close()
		return nil, err
	}
	args := map[string]uint64{"dilation": uint64(dil)}
	for k, v := range settings {
		args[k] = v
	}
	if _, err := u.ctl.call("reset" + conformance.FormatArgs(args)); err != nil {
		u.Close()
		if strings.Contains(err.Error(), "unknown iut setting") {
			return nil, conformance.Unsupported(err.Error())
		}
		return nil, err
	}
	u.start = time.Now()
	go u.read()
	return u, nil
}

func inNS(f func(func() error) error, fn func() error) error {
	if f == nil {
		return fn()
	}
	return f(fn)
}

// listenUDP opens a UDP socket that reports each packet's IPv4 TOS.
func listenUDP(at netip.AddrPort) (*net.UDPConn, error) {
	c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(at))
	if err != nil {
		return nil, fmt.Errorf("conformance: listening on UDP %v: %w", at, err)
	}
	if err := setsockopt(c, syscall.IP_RECVTOS, 1); err != nil {
		c.Close()
		return nil, fmt.Errorf("conformance: IP_RECVTOS: %w", err)
	}
	return c, nil
}

func setsockopt(c *net.UDPConn, opt, v int) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_IP, opt, v) }); err != nil {
		return err
	}
	return serr
}

// readTOS reads one packet and its IPv4 TOS byte.
func readTOS(c *net.UDPConn, buf, oob []byte) (int, netip.AddrPort, uint8, error) {
	n, oobn, _, from, err := c.ReadMsgUDPAddrPort(buf, oob)
	if err != nil {
		return 0, from, 0, err
	}
	var tos uint8
	if msgs, err := syscall.ParseSocketControlMessage(oob[:oobn]); err == nil {
		for _, m := range msgs {
			if m.Header.Level == syscall.IPPROTO_IP && m.Header.Type == syscall.IP_TOS && len(m.Data) > 0 {
				tos = m.Data[0]
			}
		}
	}
	return n, from, tos, nil
}

// sockets sends from chosen UDP source ports (a path's entropy) with a
// chosen ECN field, one socket per source port.
type sockets struct {
	mu   sync.Mutex
	inNS func(func() error) error
	from netip.Addr
	to   netip.AddrPort
	by   map[uint16]*net.UDPConn
}

func newSockets(inNS func(func() error) error, from netip.Addr, to netip.AddrPort) *sockets {
	return &sockets{inNS: inNS, from: from, to: to, by: map[uint16]*net.UDPConn{}}
}

// maxSockets bounds the source ports one test may send from.
const maxSockets = 1024

func (s *sockets) send(sport uint16, ecn uint8, pkt []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.by[sport]
	if c == nil {
		if len(s.by) >= maxSockets {
			return fmt.Errorf("conformance: more than %d source ports in one test", maxSockets)
		}
		err := inNS(s.inNS, func() error {
			var err error
			c, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(s.from, sport)))
			return err
		})
		if err != nil {
			return fmt.Errorf("conformance: sending from UDP port %d: %w", sport, err)
		}
		s.by[sport] = c
	}
	if err := setsockopt(c, syscall.IP_TOS, int(ecn&3)); err != nil {
		return fmt.Errorf("conformance: setting ECN: %w", err)
	}
	_, err := c.WriteToUDPAddrPort(pkt, s.to)
	return err
}

func (s *sockets) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, c := range s.by {
		c.Close()
		delete(s.by, k)
	}
}

// ECN field values.
const (
	ecnNotECT = 0
	ecnECT0   = 2
	ecnCE     = 3
)

// udpIUT is an IUT over UDP, as the tester sees it.
type udpIUT struct {
	t     *UDPTarget
	dil   float64
	start time.Time
	ctl   *controlClient
	rx    *net.UDPConn
	tx    *sockets
	ch    chan conformance.Sent
	lost  int // packets the receive queue had no room for
}

// Slack is the target's Slack in script time.
func (u *udpIUT) Slack() int64 {
	s := u.t.Slack
	if s == 0 {
		s = DefaultSlack
	}
	return int64(float64(s) / u.dil)
}

func (u *udpIUT) Now() int64 { return int64(float64(time.Since(u.start)) / u.dil) }

// wall is when script time t falls on the wall clock.
func (u *udpIUT) wall(t int64) time.Time { return u.start.Add(time.Duration(float64(t) * u.dil)) }

func (u *udpIUT) read() {
	buf := make([]byte, 65536)
	oob := make([]byte, 128)
	for {
		n, from, tos, err := readTOS(u.rx, buf, oob)
		if err != nil {
			close(u.ch)
			return
		}
		if from.Addr() != u.t.Addr.Addr() {
			continue // not from the IUT
		}
		s := conformance.Sent{At: u.Now(), SrcPort: from.Port(), ECT: tos&3 != 0, Bytes: append([]byte(nil), buf[:n]...)}
		select {
		case u.ch <- s:
		default:
			u.lost++
		}
	}
}

func (u *udpIUT) Run(until int64) ([]conformance.Sent, error) {
	var out []conformance.Sent
	timer := time.NewTimer(time.Until(u.wall(until)))
	defer timer.Stop()
	select {
	case s, ok := <-u.ch:
		if !ok {
			return nil, errors.New("conformance: the tester's socket closed")
		}
		out = append(out, s)
	case <-timer.C:
	}
	for {
		select {
		case s, ok := <-u.ch:
			if !ok {
				return out, nil
			}
			out = append(out, s)
		default:
			return out, nil
		}
	}
}

func (u *udpIUT) Inject(pkt []byte, m conformance.InMeta) error {
	if m.Port != 0 {
		return conformance.Unsupported("the udp target has one port: a test that picks the IUT's NIC port runs on sim only")
	}
	ecn := uint8(ecnECT0)
	if m.CE {
		ecn = ecnCE
	}
	return u.tx.send(m.SrcPort, ecn, pkt)
}

func (u *udpIUT) Do(verb string, args map[string]uint64) error {
	_, err := u.ctl.call("do " + verb + conformance.FormatArgs(args))
	return err
}

func (u *udpIUT) Completions() ([]conformance.Completion, error) {
	v, err := u.ctl.call("completions")
	if err != nil {
		return nil, err
	}
	var out []conformance.Completion
	if err := json.Unmarshal([]byte(v), &out); err != nil {
		return nil, fmt.Errorf("control completions: %w", err)
	}
	return out, nil
}

func (u *udpIUT) Mem(key uint32, addr uint64, n int) ([]byte, error) {
	v, err := u.ctl.call(fmt.Sprintf("mem %#x %#x %d", key, addr, n))
	if err != nil {
		return nil, err
	}
	b, err := hex.DecodeString(v)
	if err != nil || len(b) != n {
		return nil, fmt.Errorf("control mem: malformed answer")
	}
	return b, nil
}

func (u *udpIUT) Counter(name string) (uint64, error) {
	v, err := u.ctl.call("counter " + name)
	if err != nil {
		if strings.Contains(err.Error(), "unknown counter") {
			return 0, conformance.Unsupported(err.Error())
		}
		return 0, err
	}
	return strconv.ParseUint(v, 10, 64)
}

func (u *udpIUT) State() (string, error) { return u.ctl.call("state") }

func (u *udpIUT) Close() error {
	if u.ctl != nil {
		u.ctl.close()
	}
	if u.rx != nil {
		u.rx.Close()
	}
	u.tx.close()
	return nil
}
