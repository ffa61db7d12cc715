package live

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"testing"

	"golang.org/x/net/ipv4"

	"github.com/mrlab/mrlab/internal/testenv"
	"github.com/mrlab/mrlab/labs/hostns"
	"github.com/mrlab/mrlab/transport/metaroce/wire"
)

// metaroceSyn is a well-formed MetaRoCE connection request, as any program
// on a lab host can send from an ordinary UDP socket.
func metaroceSyn() []byte {
	b := make([]byte, wire.SetupSize+wire.TrailerSize)
	wire.Setup(b).Put(&wire.SetupFields{Common: wire.Common{Type: wire.TypeSyn}, SrcConn: 77, Nonce: 0x5eed,
		Paths: 1, Ports: 1, MTU: 1024, MsgWindow: 16, DSNWindow: 64, LineRate: 1000})
	wire.Seal(b, wire.SetupSize)
	return b
}

// sendUnsolicitedSyn sends a MetaRoCE SYN from an unprivileged-style UDP
// socket in ns to dst's MetaRoCE port.
func sendUnsolicitedSyn(ns *hostns.Namespace, dst netip.Addr) error {
	var c net.PacketConn
	if err := ns.Do(func() (err error) { c, err = net.ListenPacket("udp4", "0.0.0.0:0"); return err }); err != nil {
		return err
	}
	defer c.Close()
	_, err := c.WriteTo(metaroceSyn(), net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, wire.UDPPort)))
	return err
}

// sendSpoofed sends, from a raw socket in ns, a UDP packet to dst's
// MetaRoCE port whose IPv4 source is src (another host's address).
func sendSpoofed(ns *hostns.Namespace, src, dst netip.Addr) error {
	var pc net.PacketConn
	if err := ns.Do(func() (err error) { pc, err = net.ListenPacket("ip4:udp", "0.0.0.0"); return err }); err != nil {
		return err
	}
	defer pc.Close()
	rc, err := ipv4.NewRawConn(pc)
	if err != nil {
		return err
	}
	payload := metaroceSyn()
	udp := make([]byte, 8+len(payload))
	binary.BigEndian.PutUint16(udp[0:], 49999)
	binary.BigEndian.PutUint16(udp[2:], wire.UDPPort)
	binary.BigEndian.PutUint16(udp[4:], uint16(len(udp)))
	copy(udp[8:], payload)
	h := &ipv4.Header{Version: 4, Len: ipv4.HeaderLen, TotalLen: ipv4.HeaderLen + len(udp), TTL: 64, Protocol: 17,
		Src: net.IP(src.AsSlice()), Dst: net.IP(dst.AsSlice())}
	return rc.WriteTo(h, udp, nil)
}

// ipNetnsBetween runs `ip netns add` and `ip netns del` of a namespace of
// its own while a lab is up: the lab's teardown must not be disturbed
// (it used to be, when iproute2 bound /run/netns over the lab's mounts).
func ipNetnsBetween(t *testing.T) (del func()) {
	ip := testenv.RequireCommand(t, "ip")
	name := fmt.Sprintf("mrlt-%d-iproute2", os.Getpid())
	if out, err := exec.Command(ip, "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", name, err, out)
	}
	return func() {
		if out, err := exec.Command(ip, "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", name, err, out)
		}
	}
}
