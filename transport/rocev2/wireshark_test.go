package rocev2

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/internal/testenv"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/rocev2/ib"
)

// capture records every framed packet the harness carries as raw IPv4.
type capture struct {
	w *pcapgo.Writer
	n int
}

func (c *capture) record(t testing.TB, now sim.Time, b *packet.Buffer) {
	ci := gopacket.CaptureInfo{Timestamp: time.Unix(0, int64(now)).UTC(), CaptureLength: b.Len(), Length: b.Len()}
	if err := c.w.WritePacket(ci, b.Data()); err != nil {
		t.Fatal(err)
	}
	c.n++
}

// TestWiresharkDecodes writes a capture of a lossy exchange (CM, WRITE,
// SEND with immediate, READ, ACK, NAK, CNP) and has tshark decode it with
// Wireshark's own InfiniBand dissector: every packet must decode as
// RoCEv2 with the opcode, QP and PSN we sent, with no malformed-packet
// mark and no expert-info message. (Wireshark shows the ICRC but does not
// verify it; TestICRCKnownVector checks it against a ConnectX-4.)
// It needs tshark (see testenv.RequireCommand).
func TestWiresharkDecodes(t *testing.T) {
	tshark := testenv.RequireCommand(t, "tshark")
	path := filepath.Join(t.TempDir(), "rocev2.pcap")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	cp := &capture{w: pcapgo.NewWriter(f)}
	if err := cp.w.WriteFileHeader(65536, layers.LinkTypeRaw); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, harnessConfig{mtu: 1024, opts: Options{AckTimeout: 100 * sim.Microsecond}})
	var want []string
	h.capture = func(now sim.Time, b *packet.Buffer) {
		cp.record(t, now, b)
		bth := ib.BTH(b.Data()[framing:])
		want = append(want, fmt.Sprintf("4791|%d|0x%06x|%d||", bth.Opcode(), bth.DestQP(), bth.PSN()))
	}
	drops := 0
	h.filter = func(from *endpoint, pk *ib.Packet) verdict {
		switch {
		case pk.BTH.Opcode() == ib.OpWriteMiddle && drops == 0:
			drops++
			return drop
		case pk.BTH.Opcode().Class() == ib.ClassSend && pk.BTH.DestQP() != cmQPN:
			return markCE
		}
		return pass
	}
	h.dial()
	lkey, src := h.a.mem.add(0x1000, 8192, allAccess)
	rkey, _ := h.b.mem.add(0x1000, 8192, allAccess)
	fill(src, 8)
	h.b.postRecv(recvWR(1, rkey, 0x1000, 4096))
	h.a.postSend(writeWR(1, lkey, 0x1000, 5000, rkey, 0x1000))
	s, k := sgl(lkey, 0x1000, 2001)
	h.a.postSend(transport.WorkRequest{ID: 2, Op: transport.OpSendImm, SGL: s, NumSGE: k, Imm: 0xabcd})
	rd := writeWR(3, lkey, 0x1000, 3000, rkey, 0x1000)
	rd.Op = transport.OpRead
	h.a.postSend(rd)
	h.runUntil(func() bool { return len(h.a.comps) == 3 }, sim.Second)
	h.loop.RunUntil(h.loop.Now() + sim.Millisecond)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(tshark, "-r", path,
		"-T", "fields", "-E", "separator=|", "-e", "udp.dstport", "-e", "infiniband.bth.opcode",
		"-e", "infiniband.bth.destqp", "-e", "infiniband.bth.psn", "-e", "_ws.malformed", "-e", "_ws.expert.severity").Output()
	if err != nil {
		t.Fatalf("tshark: %v\n%s", err, out)
	}
	if os.Getenv("KEEP_PCAP") != "" {
		exec.Command("cp", path, os.Getenv("KEEP_PCAP")).Run()
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	t.Logf("tshark decoded %d packets (captured %d); first lines:\n%s", len(lines), cp.n, strings.Join(lines[:min(6, len(lines))], "\n"))
	if len(lines) != cp.n {
		t.Fatalf("tshark shows %d packets, captured %d", len(lines), cp.n)
	}
	ops := map[string]bool{}
	for i, l := range lines {
		if l != want[i] {
			t.Errorf("packet %d: tshark says %q, we sent %q", i+1, l, want[i])
		}
		ops[strings.Split(l, "|")[1]] = true
	}
	// CM SEND, WRITE first/middle/last, SEND first/last-imm, READ request
	// and responses, ACK (NAK), CNP.
	for _, op := range []ib.Opcode{ib.OpSendOnly, ib.OpWriteFirst, ib.OpWriteMiddle, ib.OpWriteLast, ib.OpSendFirst,
		ib.OpSendLastImm, ib.OpReadRequest, ib.OpReadResponseFirst, ib.OpReadResponseLast, ib.OpAcknowledge, ib.OpCNP} {
		if !ops[fmt.Sprint(int(op))] {
			t.Errorf("capture has no %v", op)
		}
	}
}
