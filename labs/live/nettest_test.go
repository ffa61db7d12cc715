package live

import (
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"

	"github.com/mrlab/mrlab/labs/hostns"
)

// Traffic helpers for the namespace tests: Go programs whose sockets are
// opened on a thread inside a host's namespace, so they need no ping or
// iperf3 (the tests use iperf3 too when it is installed).

// openNS opens a namespace and closes the handle when the test ends.
func openNS(t testing.TB, name string) *hostns.Namespace {
	t.Helper()
	ns, err := hostns.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	return ns
}

// ping sends count ICMP echo requests from ns to dst and returns the RTTs
// of the replies.
func ping(ns *hostns.Namespace, dst netip.Addr, count int, timeout time.Duration) ([]time.Duration, error) {
	var c *icmp.PacketConn
	if err := ns.Do(func() (err error) {
		c, err = icmp.ListenPacket("ip4:icmp", "0.0.0.0")
		return err
	}); err != nil {
		return nil, fmt.Errorf("icmp socket: %w", err)
	}
	defer c.Close()
	var rtts []time.Duration
	id := os.Getpid() & 0xffff
	buf := make([]byte, 1500)
	for seq := 1; seq <= count; seq++ {
		msg := icmp.Message{Type: ipv4.ICMPTypeEcho, Body: &icmp.Echo{ID: id, Seq: seq, Data: []byte("mrlab-ping")}}
		b, _ := msg.Marshal(nil)
		start := time.Now()
		if _, err := c.WriteTo(b, &net.IPAddr{IP: dst.AsSlice()}); err != nil {
			return rtts, err
		}
		c.SetReadDeadline(start.Add(timeout))
		for {
			n, _, err := c.ReadFrom(buf)
			if err != nil {
				return rtts, fmt.Errorf("echo %d: %w", seq, err)
			}
			m, err := icmp.ParseMessage(1, buf[:n])
			if err != nil || m.Type != ipv4.ICMPTypeEchoReply {
				continue
			}
			if e, ok := m.Body.(*icmp.Echo); ok && e.Seq == seq {
				rtts = append(rtts, time.Since(start))
				break
			}
		}
	}
	return rtts, nil
}

// tcpResult is one bulk TCP transfer.
type tcpResult struct {
	Bytes   int64
	Elapsed time.Duration
	OK      bool // receiver's digest matched the sender's
}

func (r tcpResult) Mbps() float64 { return float64(r.Bytes) * 8 / r.Elapsed.Seconds() / 1e6 }

// tcpTransfer sends n pseudo-random bytes from client namespace to a
// server in server namespace at addr:port and checks the receiver's
// SHA-256 against the sender's. during, if set, runs once the transfer
// started (faults mid-run).
func tcpTransfer(client, server *hostns.Namespace, addr netip.Addr, n int64, limit time.Duration, during func()) (tcpResult, error) {
	var ln net.Listener
	if err := server.Do(func() (err error) {
		ln, err = net.Listen("tcp4", netip.AddrPortFrom(addr, 5201).String())
		return err
	}); err != nil {
		return tcpResult{}, err
	}
	defer ln.Close()
	type srvRes struct {
		sum [32]byte
		n   int64
		err error
	}
	srv := make(chan srvRes, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			srv <- srvRes{err: err}
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(limit))
		h := sha256.New()
		m, err := io.Copy(h, c)
		var r srvRes
		copy(r.sum[:], h.Sum(nil))
		r.n, r.err = m, err
		srv <- r
	}()
	var conn net.Conn
	if err := client.Do(func() (err error) {
		conn, err = net.DialTimeout("tcp4", netip.AddrPortFrom(addr, 5201).String(), 10*time.Second)
		return err
	}); err != nil {
		return tcpResult{}, fmt.Errorf("dial: %w", err)
	}
	conn.SetDeadline(time.Now().Add(limit))
	h := sha256.New()
	src := io.TeeReader(io.LimitReader(rand.NewChaCha8([32]byte{1}), n), h)
	start := time.Now()
	sent := make(chan error, 1)
	go func() {
		_, err := io.Copy(conn, src)
		conn.(*net.TCPConn).CloseWrite()
		sent <- err
	}()
	if during != nil {
		during()
	}
	if err := <-sent; err != nil {
		conn.Close()
		return tcpResult{}, fmt.Errorf("sending: %w", err)
	}
	r := <-srv
	el := time.Since(start)
	conn.Close()
	if r.err != nil {
		return tcpResult{}, fmt.Errorf("receiving: %w", r.err)
	}
	return tcpResult{Bytes: r.n, Elapsed: el, OK: r.n == n && string(r.sum[:]) == string(h.Sum(nil))}, nil
}

// udpResult is a paced UDP blast: what arrived of what was sent.
type udpResult struct {
	Sent, Received int
	Size           int
	Elapsed        time.Duration
}

func (r udpResult) Mbps() float64 {
	return float64(r.Received*r.Size) * 8 / r.Elapsed.Seconds() / 1e6
}

// udpBlast sends count datagrams of size bytes paced at rate bits/s (in
// 1ms batches, as iperf3 -u -b does) and counts what the server receives
// (until 500ms of silence).
func udpBlast(client, server *hostns.Namespace, addr netip.Addr, count, size int, rate float64) (udpResult, error) {
	var rc, sc net.PacketConn
	ap := netip.AddrPortFrom(addr, 5202).String()
	if err := server.Do(func() (err error) { rc, err = net.ListenPacket("udp4", ap); return err }); err != nil {
		return udpResult{}, err
	}
	defer rc.Close()
	if err := client.Do(func() (err error) { sc, err = net.ListenPacket("udp4", "0.0.0.0:0"); return err }); err != nil {
		return udpResult{}, err
	}
	defer sc.Close()
	got := make(chan int, 1)
	var last time.Time
	go func() {
		buf := make([]byte, 65536)
		n := 0
		for {
			rc.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
			if _, _, err := rc.ReadFrom(buf); err != nil {
				got <- n
				return
			}
			n++
			last = time.Now()
		}
	}()
	dst := net.UDPAddrFromAddrPort(netip.AddrPortFrom(addr, 5202))
	msg := make([]byte, size)
	start := time.Now()
	sent := 0
	perMs := max(1, int(rate/1000/float64(8*size)))
	for i := 0; i < count; i++ {
		if i%perMs == 0 {
			// Sleep until this batch is due.
			due := start.Add(time.Duration(i/perMs) * time.Millisecond)
			if d := time.Until(due); d > 0 {
				time.Sleep(d)
			}
		}
		if _, err := sc.WriteTo(msg, dst); err == nil {
			sent++
		}
	}
	n := <-got
	el := last.Sub(start)
	if n == 0 {
		el = time.Since(start)
	}
	return udpResult{Sent: sent, Received: n, Size: size, Elapsed: el}, nil
}

// vethPair makes two namespaces joined by a veth pair (198.19.255.1 and
// .2/30), created from inside the first so nothing touches the root
// namespace. Everything is removed by exact name when the test ends.
// testNamespace creates the namespace name with IPv6 off, closed and
// deleted (by that exact name) when the test ends.
func testNamespace(t testing.TB, name string) *hostns.Namespace {
	t.Helper()
	ns, err := hostns.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ns.Close()
		if err := hostns.Delete(name); err != nil {
			t.Errorf("deleting %s: %v", name, err)
		}
	})
	if err := ns.DisableIPv6(); err != nil {
		t.Fatal(err)
	}
	return ns
}

func vethPair(t testing.TB) (a, b *hostns.Namespace, addrB netip.Addr) {
	t.Helper()
	var nss [2]*hostns.Namespace
	for i := range nss {
		nss[i] = testNamespace(t, fmt.Sprintf("mrlt-%d-veth%d", os.Getpid(), i))
	}
	peerNS, err := openFD(nss[1])
	if err != nil {
		t.Fatal(err)
	}
	defer peerNS.Close()
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "v0", MTU: DefaultMTU}, PeerName: "v1", PeerNamespace: netlink.NsFd(peerNS.Fd())}
	if err := nss[0].Netlink().LinkAdd(veth); err != nil {
		t.Fatalf("creating veth: %v", err)
	}
	for i, ns := range nss {
		l, err := ns.Netlink().LinkByName(fmt.Sprintf("v%d", i))
		if err != nil {
			t.Fatal(err)
		}
		addr := &netlink.Addr{IPNet: &net.IPNet{IP: net.IPv4(198, 19, 255, byte(i+1)), Mask: net.CIDRMask(30, 32)}}
		if err := ns.Netlink().AddrAdd(l, addr); err != nil {
			t.Fatal(err)
		}
		if err := ns.Netlink().LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
		lo, _ := ns.Netlink().LinkByName("lo")
		ns.Netlink().LinkSetUp(lo)
	}
	return nss[0], nss[1], netip.MustParseAddr("198.19.255.2")
}

// openFD opens the namespace's file for passing as a netlink attribute.
func openFD(ns *hostns.Namespace) (*os.File, error) {
	return os.Open(hostns.NetnsDir + "/" + ns.Name())
}

// iperf3 runs an iperf3 client in the client namespace against a server in
// the server namespace and returns the receiver's bits per second. The test
// ends (see testenv.RequireCommand) when iperf3 is not installed.
func iperf3(t testing.TB, client, server *hostns.Namespace, addr netip.Addr, args ...string) (float64, error) {
	t.Helper()
	r, err := iperf3Run(t, client, server, addr, args...)
	return r.BitsPerSecond, err
}
