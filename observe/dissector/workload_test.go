package dissector

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/header"
	"github.com/mrlab/mrlab/internal/packet"
	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/observe/capture"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/metaroce"
	"github.com/mrlab/mrlab/transport/metaroce/wire"
	"github.com/mrlab/mrlab/transport/rocev2"
	"github.com/mrlab/mrlab/workload"
)

// workloadCapture runs one small workload on a 2-plane leaf/spine lab of 4
// hosts with mrlab's own transports, capturing at leaf p0-leaf0 (two
// hosts' plane-0 traffic in and out, spine links included) and at h3 (its
// ports on both planes). Light ECN marking and 3% loss on one spine link
// make the transports retransmit, echo congestion and SACK holes. It
// returns the capture files.
func workloadCapture(t *testing.T, name workload.Name, kind transport.Kind) []string {
	t.Helper()
	topo, err := fabric.LeafSpine(fabric.LeafSpineParams{Planes: 2, Leaves: 2, Spines: 2, HostsPerLeaf: 2,
		HostLink: fabric.LinkParams{Rate: 100e9, Delay: 500, ECN: fabric.ECNConfig{Mode: fabric.ECNStep, K: 30000}}})
	if err != nil {
		t.Fatal(err)
	}
	loop := sim.NewLoop()
	pool := packet.NewPool()
	n, err := fabric.Build(loop, pool, topo, fabric.BuildOptions{Seed: 11})
	if err != nil {
		t.Fatal(err)
	}
	loss, _ := fabric.ParseImpairment("loss 3%")
	if err := n.SetImpairment("p0-leaf0-spine1", fabric.AtoB, loss); err != nil {
		t.Fatal(err)
	}
	cl, err := workload.NewCluster("ls", loop, pool, n, 11, workload.NICOptions{
		Protocols: func() []transport.Protocol {
			return []transport.Protocol{metaroce.NewProtocol(metaroce.Options{Paths: 4}), rocev2.NewProtocol(rocev2.Options{})}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	specs, err := capture.ParseSpecs("p0-leaf0,h3")
	if err != nil {
		t.Fatal(err)
	}
	c, err := capture.Open(dir, specs, capture.NetworkLayout(n), nil)
	if err != nil {
		t.Fatal(err)
	}
	n.SetObserver(c)
	spec := workload.Spec{Name: name, Transport: kind, Size: 64 << 10, Iterations: 4, QueueDepth: 4}
	switch {
	case name == workload.AllToAll || name == workload.AllReduce:
		spec.Iterations = 2
	case name.IsLatency():
		spec.Size, spec.Iterations, spec.QueueDepth = 64, 20, 1
	}
	if _, err := workload.Run(cl, spec); err != nil {
		t.Fatalf("%s over %v: %v", name, kind, err)
	}
	if err := c.Close(loop.Now()); err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, sp := range specs {
		files = append(files, filepath.Join(dir, sp.FileName()))
	}
	return files
}

// typeFields are the fields every packet of a type must decode.
var typeFields = map[string][]string{
	"data":  {"metaroce.data.stream", "metaroce.data.msn", "metaroce.data.msn_base", "metaroce.data.dsn", "metaroce.data.msg_len", "metaroce.data.offset", "metaroce.data.addr", "metaroce.data.key", "metaroce.data.token", "metaroce.data.imm", "metaroce.data.demand", "metaroce.data.payload_len"},
	"ack":   {"metaroce.ack.cack", "metaroce.ack.echo_ts", "metaroce.ack.ce_count", "metaroce.ack.rx_count", "metaroce.ack.rate_hint", "metaroce.ack.sack", "metaroce.ack.sack_count", "metaroce.ack.sack_set"},
	"nak":   {"metaroce.nak.reason", "metaroce.nak.msn", "metaroce.nak.dsn"},
	"setup": {"metaroce.setup.src_conn", "metaroce.setup.nonce", "metaroce.setup.paths", "metaroce.setup.ports", "metaroce.setup.mtu", "metaroce.setup.msg_window", "metaroce.setup.dsn_window", "metaroce.setup.line_rate"},
}

func fieldGroup(typ int) string {
	switch {
	case typ >= 1 && typ <= 4:
		return "data"
	case typ == 5:
		return "ack"
	case typ == 6:
		return "nak"
	case typ == 8 || typ == 9:
		return "setup"
	}
	return ""
}

// TestDissectWorkloadCaptures: tshark with the dissector decodes the
// captures of every workload, over MetaRoCE, with every field of every
// packet present, no malformed packet, no error, and good CRCs.
func TestDissectWorkloadCaptures(t *testing.T) {
	tshark(t)
	if testing.Short() {
		t.Skip("runs every workload and tshark")
	}
	total := map[int]int{}
	holes := 0
	for _, name := range workload.Names() {
		t.Run(string(name), func(t *testing.T) {
			seen := 0
			defer func() {
				if seen == 0 {
					t.Errorf("%s: no MetaRoCE packet captured", name)
				}
			}()
			for _, file := range workloadCapture(t, name, transport.MetaRoCE) {
				verbose := runTshark(t, file, "-V")
				if m := malformed.FindString(verbose); m != "" {
					i := strings.Index(verbose, m)
					t.Fatalf("%s: tshark reports %q near:\n%s", filepath.Base(file), m, verbose[max(0, i-3000):i+200])
				}
				common := []string{"udp.dstport", "metaroce.version", "metaroce.type", "metaroce.flags", "metaroce.path",
					"metaroce.gen", "metaroce.dst_conn", "metaroce.ts", "metaroce.crc", "metaroce.crc.status"}
				// One tshark pass: the common fields, then every group's.
				all := append([]string(nil), common...)
				at := map[string]int{}
				for _, g := range []string{"data", "ack", "nak", "setup"} {
					at[g] = len(all)
					all = append(all, typeFields[g]...)
				}
				all = append(all, "metaroce.ack.sacked_psn")
				rows := fields(t, file, all...)
				want := goDecode(t, file)
				if len(want) != len(rows) {
					t.Fatalf("%s: tshark shows %d frames, the file has %d", filepath.Base(file), len(rows), len(want))
				}
				mr := 0
				for i, r := range rows {
					if r[0] != "4796" {
						continue
					}
					mr++
					for j := range common {
						if r[j] == "" {
							t.Errorf("%s frame %d: %s missing", filepath.Base(file), i+1, common[j])
						}
					}
					if r[9] != "1" {
						t.Errorf("%s frame %d: CRC status %q", filepath.Base(file), i+1, r[9])
					}
					typ, _ := strconv.Atoi(r[2])
					total[typ]++
					if typ == 5 && r[at["ack"]+6] != "0" {
						holes++ // an ACK reporting PSNs past a hole
					}
					// The values agree with mrlab's own decoder.
					w := want[i]
					got := []string{r[2], r[6], r[len(r)-1]}
					if typ == 5 {
						got[2] = r[at["ack"]] + "|" + got[2]
					} else if fieldGroup(typ) == "data" {
						got[2] = r[at["data"]+1] + "|" + r[at["data"]+3] + "|" + r[at["data"]+5]
					} else {
						got[2] = ""
					}
					if !cmp.Equal(w, got) {
						t.Errorf("%s frame %d: tshark %q, wire package %q", filepath.Base(file), i+1, got, w)
					}
					if g := fieldGroup(typ); g != "" {
						for j, f := range typeFields[g] {
							if r[at[g]+j] == "" {
								t.Errorf("%s frame %d (type %d): %s missing", filepath.Base(file), i+1, typ, f)
							}
						}
					}
				}
				if mr != len(rows) {
					t.Errorf("%s: %d MetaRoCE frames of %d", filepath.Base(file), mr, len(rows))
				}
				seen += mr
			}
		})
	}
	t.Logf("MetaRoCE packets decoded by type: %v; ACKs with SACK bits: %d", total, holes)
	if holes == 0 {
		t.Error("no ACK with a SACK hole in any capture: the loss did not exercise the SACK decode")
	}
	// Across the workloads every common type appeared.
	for _, typ := range []int{1, 2, 3, 4, 5, 8, 9, 10} {
		if total[typ] == 0 {
			t.Errorf("no packet of type %d in any workload capture", typ)
		}
	}
}

// TestRoCEv2CapturesDecode: RoCEv2 captures decode with Wireshark's own
// InfiniBand dissector (no mrlab script needed), without malformed packets.
func TestRoCEv2CapturesDecode(t *testing.T) {
	tshark(t)
	if testing.Short() {
		t.Skip("runs a workload and tshark")
	}
	decoded := 0
	for _, file := range workloadCapture(t, workload.WriteBW, transport.RoCEv2) {
		verbose := runTshark(t, file, "-V")
		if m := malformed.FindString(verbose); m != "" {
			t.Fatalf("%s: tshark reports %q", filepath.Base(file), m)
		}
		rows := fields(t, file, "infiniband.bth.opcode", "infiniband.bth.destqp", "infiniband.bth.psn")
		for i, r := range rows {
			for _, v := range r {
				if v == "" {
					t.Fatalf("%s frame %d: BTH not decoded: %q", filepath.Base(file), i+1, r)
				}
			}
			decoded++
		}
	}
	if decoded == 0 {
		t.Error("no RoCEv2 packet captured")
	}
	t.Logf("%d RoCEv2 packets decoded", decoded)
}

// goDecode decodes each frame of a capture with transport/metaroce/wire:
// type, destination connection, and (ACK) "cack|sacked PSNs" or (data)
// "msn|dsn|offset", as the tshark fields print them.
func goDecode(t *testing.T, file string) [][]string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	_, pkts, err := capture.ReadAll(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	var out [][]string
	for _, p := range pkts {
		ip := header.IPv4(p.Data)
		pl := header.UDP(ip.Payload()).Payload()
		typ, body, err := wire.Parse(pl)
		if err != nil {
			out = append(out, []string{"parse error: " + err.Error()})
			continue
		}
		h := wire.Header(body)
		row := []string{strconv.Itoa(int(typ)), strconv.FormatUint(uint64(h.DstConn()), 10), ""}
		switch {
		case typ == wire.TypeAck:
			a := wire.Ack(body)
			var psns []string
			for w := 0; w < 4; w++ {
				word := a.SACKWord(w)
				for bit := 0; bit < 64; bit++ {
					if word&(1<<(63-bit)) != 0 {
						psns = append(psns, strconv.FormatUint(uint64(h.PSN()+1+uint32(64*w+bit)), 10))
					}
				}
			}
			row[2] = strconv.FormatUint(uint64(h.PSN()), 10) + "|" + strings.Join(psns, ",")
		case typ.IsData():
			d := wire.Data(body)
			row[2] = fmt.Sprintf("%d|%d|%d", d.MSN(), d.DSN(), d.Offset())
		}
		out = append(out, row)
	}
	return out
}
