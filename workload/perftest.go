package workload

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/mrlab/mrlab/internal/sim"
)

// This file prints results the way perftest (linux-rdma/perftest) prints
// them, so that a line from mrlab reads like a line from ib_write_bw and
// scripts that parse perftest's output or its --out_json file parse
// mrlab's.

// Format chooses how results are printed.
type Format struct {
	// Gbits reports bandwidth in Gbit/s (perftest's --report_gbits)
	// instead of MiB/s.
	Gbits bool
}

// perftestRule is perftest's separator line (RESULT_LINE).
const perftestRule = "---------------------------------------------------------------------------------------"

// mibFactor converts Gbit/s to perftest's MiB/s (2^20 bytes per second).
const mibFactor = 1e9 / 8 / (1 << 20)

var titles = map[Name]string{
	WriteBW:     "RDMA_Write BW Test",
	SendBW:      "Send BW Test",
	ReadBW:      "RDMA_Read BW Test",
	WriteLat:    "RDMA_Write Latency Test",
	SendLat:     "Send Latency Test",
	ReadLat:     "RDMA_Read Latency Test",
	Permutation: "Permutation (RDMA_Write) BW Test",
	Incast:      "Incast (RDMA_Write) BW Test",
	AllToAll:    "All-to-all (RDMA_Write) Test",
	AllReduce:   "Ring all-reduce (RDMA_Write_Imm) Test",
}

// jsonTest is perftest's "test" key in --out_json.
var jsonTest = map[Name]string{
	WriteBW: "RDMA_Write_BW_Test", SendBW: "Send_BW_Test", ReadBW: "RDMA_Read_BW_Test",
	WriteLat: "RDMA_Write_Latency_Test", SendLat: "Send_Latency_Test", ReadLat: "RDMA_Read_Latency_Test",
}

// cHex formats v as C's printf("%#0<width>x") does: "0x" counted in the
// width, and no prefix at all for zero.
func cHex(v uint64, width int) string {
	if v == 0 {
		return fmt.Sprintf("%0*x", width, 0)
	}
	return fmt.Sprintf("0x%0*x", max(width-2, 0), v)
}

// gid formats an IPv4 address as the IPv4-mapped GID perftest prints for
// RoCE (decimal bytes, as perftest's %02d does).
func gid(e Endpoint) string {
	var b [16]byte
	if e.Addr.Is4() {
		b[10], b[11] = 0xff, 0xff
		a := e.Addr.As4()
		copy(b[12:], a[:])
	} else if e.Addr.IsValid() {
		b = e.Addr.As16()
	}
	parts := make([]string, 16)
	for i, x := range b {
		parts[i] = fmt.Sprintf("%02d", x)
	}
	return strings.Join(parts, ":")
}

// writeHeader prints perftest's test-information block and the
// connections' address lines.
func writeHeader(b *bytes.Buffer, r *Result) {
	fmt.Fprintln(b, perftestRule)
	fmt.Fprintf(b, "                    %s\n", titles[r.Workload])
	fmt.Fprintf(b, " Dual-port       : OFF\t\tDevice         : %s\n", device(r))
	fmt.Fprintf(b, " Number of qps   : %d\t\tTransport type : %s\n", max(r.Flows, len(r.QPs)), transportName(r.Transport))
	fmt.Fprintf(b, " Connection type : RC\t\tUsing SRQ      : OFF\n")
	fmt.Fprintf(b, " TX depth        : %d\n", r.QueueDepth)
	if r.Workload == SendBW || r.Workload == SendLat {
		fmt.Fprintf(b, " RX depth        : %d\n", r.QueueDepth*max(r.Streams, 1))
	}
	if !r.Workload.IsLatency() {
		fmt.Fprintf(b, " CQ Moderation   : %d\n", r.CQMod)
	}
	fmt.Fprintf(b, " Mtu             : %d[B]\n", r.MTU)
	fmt.Fprintf(b, " Link type       : Ethernet\n")
	if r.Workload != ReadBW && r.Workload != ReadLat {
		fmt.Fprintf(b, " Max inline data : 0[B]\n")
	}
	fmt.Fprintf(b, " rdma_cm QPs\t : OFF\n")
	fmt.Fprintf(b, " Data ex. method : Ethernet\n")
	fmt.Fprintln(b, perftestRule)
	if len(r.QPs) == 0 {
		return
	}
	rdma := r.Workload == WriteBW || r.Workload == ReadBW || r.Workload == WriteLat || r.Workload == ReadLat
	side := func(name string, e Endpoint) {
		fmt.Fprintf(b, " %s address: LID %s QPN %s PSN %s", name, cHex(0, 4), cHex(uint64(e.QPN), 6), cHex(uint64(e.PSN), 6))
		if rdma {
			fmt.Fprintf(b, " RKey %s VAddr %s", cHex(uint64(e.RKey), 8), cHex(e.VAddr, 16))
		}
		fmt.Fprintf(b, "\n GID: %s\n", gid(e))
	}
	for _, q := range r.QPs {
		side("local", q.Local)
	}
	for _, q := range r.QPs {
		side("remote", q.Remote)
	}
}

// device names the NIC the way perftest's "Device" does: the client
// host's softnic.
func device(r *Result) string {
	if len(r.QPs) > 0 && r.QPs[0].Local.Host != "" {
		return r.QPs[0].Local.Host + " (mrlab softnic)"
	}
	return "mrlab softnic"
}

func transportName(t string) string {
	switch t {
	case "metaroce":
		return "MetaRoCE"
	case "rocev2":
		return "RoCEv2"
	}
	return t
}

// bwUnit returns the bandwidth column unit and the factor from Gbit/s.
func (f Format) bwUnit() (string, float64) {
	if f.Gbits {
		return "Gb/sec", 1
	}
	return "MiB/sec", mibFactor
}

// columnHeader returns perftest's column header line for r's kind of test.
func (f Format) columnHeader(r *Result) string {
	switch {
	case r.Workload.IsLatency() && r.Duration > 0:
		return " #bytes        #iterations       t_avg[usec]    tps average"
	case r.Workload.IsLatency():
		return " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] "
	case r.AlgBWGbps > 0:
		return " #bytes     #iterations    algbw[Gb/sec]    busbw[Gb/sec]    time/op[usec]"
	}
	u, _ := f.bwUnit()
	return fmt.Sprintf(" #bytes     #iterations    BW peak[%s]    BW average[%s]   MsgRate[Mpps]", u, u)
}

// line returns perftest's result line for r.
func (f Format) line(r *Result) string {
	switch {
	case r.Workload.IsLatency() && r.Duration > 0:
		var avg float64
		if r.Latency != nil {
			avg = r.Latency.Mean.Micros()
		}
		return fmt.Sprintf(" %-7d       %d            %-7.2f        %-7.2f", r.Size, r.WindowMessages, avg, r.TPS)
	case r.Workload.IsLatency():
		l := r.Latency
		if l == nil {
			l = &Dist{}
		}
		return fmt.Sprintf(" %-7d %d          %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f     \t%-7.2f\t\t%-7.2f \t\t%-7.2f",
			r.Size, l.N, l.Min.Micros(), l.Max.Micros(), l.P50.Micros(), l.Mean.Micros(), l.Stdev.Micros(), l.P99.Micros(), l.P999.Micros())
	case r.AlgBWGbps > 0:
		var per float64
		if r.Iterations > 0 {
			per = (r.Elapsed / sim.Time(r.Iterations)).Micros()
		}
		return fmt.Sprintf(" %-10d %-14d %-16.2f %-16.2f %.2f", r.Size, r.Iterations, r.AlgBWGbps, r.BusBWGbps, per)
	}
	iters := r.Messages
	if r.Duration > 0 {
		iters = r.WindowMessages
	}
	return f.bwLine(r.Size, iters, r.BWPeakGbps, r.BWAverageGbps, r.MsgRateMpps)
}

// bwLine is perftest's bandwidth result line. Like perftest, it switches
// to six decimals when a Gbit/s average is below 0.1.
func (f Format) bwLine(size int, iters int64, peak, avg, mpps float64) string {
	_, k := f.bwUnit()
	if f.Gbits && avg < 0.1 {
		return fmt.Sprintf(" %-7d    %d           %-7.6f            %-7.6f            %-7.6f", size, iters, peak*k, avg*k, mpps)
	}
	return fmt.Sprintf(" %-7d    %-10d       %-7.2f            %-7.2f\t\t     %-7.6f", size, iters, peak*k, avg*k, mpps)
}

// IntervalLine is perftest's --run_infinitely line for one interval (no
// peak: perftest does not measure it when running infinitely).
func (f Format) IntervalLine(iv Interval) string {
	return f.bwLine(iv.Size, iv.Messages, 0, iv.Gbps(), iv.MsgRateMpps())
}

// WritePerftestHeader prints what perftest prints before its result
// lines: the test information, the connections' addresses and the column
// header.
func WritePerftestHeader(w io.Writer, r *Result, f Format) error {
	var b bytes.Buffer
	writeHeader(&b, r)
	b.WriteString(f.columnHeader(r) + "\n")
	_, err := w.Write(b.Bytes())
	return err
}

// WritePerftest prints results of the same test (one per message size
// for -a) as perftest does: the test information, the connections'
// addresses, the column header and one result line per result. detail
// adds mrlab's figures (retransmissions, drops, data check...) after it.
func WritePerftest(w io.Writer, rs []*Result, f Format, detail bool) error {
	if len(rs) == 0 {
		return nil
	}
	var b bytes.Buffer
	if rs[0].Duration > 0 && !rs[0].Workload.IsLatency() && rs[0].AlgBWGbps == 0 {
		fmt.Fprintln(&b, " WARNING: BW peak won't be measured in this run.")
	}
	writeHeader(&b, rs[0])
	b.WriteString(f.columnHeader(rs[0]) + "\n")
	for _, r := range rs {
		b.WriteString(f.line(r) + "\n")
	}
	fmt.Fprintln(&b, perftestRule)
	if detail {
		writeDetails(&b, rs)
		fmt.Fprintln(&b, perftestRule)
	}
	_, err := w.Write(b.Bytes())
	return err
}

// MarshalPerftestJSON returns r as perftest's --out_json file: a
// "test_info" object and a "results" object, with perftest's key names
// (MsgSize, n_iterations, BW_peak, BW_average, MsgRate; t_min ... for the
// latency tests). Bandwidths are in the units f reports. Keys perftest
// writes about hardware mrlab does not have (PCIe relaxed ordering, ROCm
// memory...) are left out. perftest writes the keys in a fixed order;
// so does this.
func MarshalPerftestJSON(r *Result, f Format) ([]byte, error) {
	type kv struct {
		k string
		v any
	}
	info := []kv{
		{"test", jsonTest[r.Workload]},
		{"Dual_port", "OFF"},
		{"Device", device(r)},
		{"Number_of_qps", max(r.Flows, len(r.QPs))},
		{"Transport_type", transportName(r.Transport)},
		{"Connection_type", "RC"},
		{"Using_SRQ", "OFF"},
		{"TX_depth", r.QueueDepth},
	}
	if r.Workload == SendBW || r.Workload == SendLat {
		info = append(info, kv{"RX_depth", r.QueueDepth * max(r.Streams, 1)})
	}
	if !r.Workload.IsLatency() {
		info = append(info, kv{"CQ_Moderation", r.CQMod})
	}
	info = append(info, kv{"Mtu", r.MTU}, kv{"Link_type", "Ethernet"})
	if r.Workload != ReadBW && r.Workload != ReadLat {
		info = append(info, kv{"Max_inline_data", 0})
	}
	info = append(info, kv{"rdma_cm_QPs", "OFF"}, kv{"Data_ex_method", "Ethernet"})
	var res []kv
	switch {
	case r.Workload.IsLatency() && r.Duration > 0:
		var avg float64
		if r.Latency != nil {
			avg = r.Latency.Mean.Micros()
		}
		res = []kv{{"MsgSize", r.Size}, {"n_iterations", r.WindowMessages}, {"t_avg", round(avg, 2)}, {"tps_average", round(r.TPS, 2)}}
	case r.Workload.IsLatency():
		l := r.Latency
		if l == nil {
			l = &Dist{}
		}
		res = []kv{{"MsgSize", r.Size}, {"n_iterations", l.N},
			{"t_min", round(l.Min.Micros(), 2)}, {"t_max", round(l.Max.Micros(), 2)}, {"t_typical", round(l.P50.Micros(), 2)},
			{"t_avg", round(l.Mean.Micros(), 2)}, {"t_stdev", round(l.Stdev.Micros(), 2)},
			{"percentile_99", round(l.P99.Micros(), 2)}, {"percentile_99.9", round(l.P999.Micros(), 2)}}
	default:
		_, k := f.bwUnit()
		iters := r.Messages
		if r.Duration > 0 {
			iters = r.WindowMessages
		}
		digits := 2
		if f.Gbits && r.BWAverageGbps < 0.1 {
			digits = 6
		}
		res = []kv{{"MsgSize", r.Size}, {"n_iterations", iters}, {"BW_peak", round(r.BWPeakGbps*k, digits)},
			{"BW_average", round(r.BWAverageGbps*k, digits)}, {"MsgRate", round(r.MsgRateMpps, 6)}}
	}
	var b bytes.Buffer
	obj := func(name string, kvs []kv, last bool) error {
		fmt.Fprintf(&b, "%q: {\n", name)
		for i, x := range kvs {
			v, err := json.Marshal(x.v)
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, "%q: %s", x.k, v)
			if i < len(kvs)-1 {
				b.WriteString(",")
			}
			b.WriteString("\n")
		}
		b.WriteString("}")
		if !last {
			b.WriteString(",")
		}
		b.WriteString("\n")
		return nil
	}
	b.WriteString("{\n")
	if err := obj("test_info", info, false); err != nil {
		return nil, err
	}
	if err := obj("results", res, true); err != nil {
		return nil, err
	}
	b.WriteString("}\n")
	return b.Bytes(), nil
}

// round rounds x to d decimals, as perftest's %.2lf / %.6lf print it.
func round(x float64, d int) json.Number {
	return json.Number(fmt.Sprintf("%.*f", d, x))
}
