package workload

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/mrlab/mrlab/internal/sim"
)

// usec formats a time in microseconds, perftest style.
func usec(t sim.Time) string { return fmt.Sprintf("%.2f", t.Micros()) }

// WriteText writes r as perftest would print it (ib_write_bw,
// ib_read_lat...), followed by mrlab's figures: completion times,
// retransmissions, ECN, drops, plane utilisation and the data check.
func WriteText(w io.Writer, r *Result, f Format) error {
	return WritePerftest(w, []*Result{r}, f, true)
}

// writeDetails writes mrlab's figures for rs: label and value for one
// result; for a sweep (perftest's -a), one row per message size with the
// figures that change with it.
func writeDetails(b *bytes.Buffer, rs []*Result) {
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	if len(rs) > 1 {
		fmt.Fprintln(tw, " #bytes\tgoodput [Gb/s]\tmsg time p50/p99 [us]\tretransmissions\ttimeouts\tdrops\tdata check")
		for _, r := range rs {
			check := "ok"
			if !r.Check.OK {
				check = "FAILED: " + r.Check.FirstBad
			}
			fmt.Fprintf(tw, " %d\t%.2f\t%s / %s\t%d\t%d\t%s\t%s\n", r.Size, r.GoodputGbps,
				usec(r.MessageTime.P50), usec(r.MessageTime.P99), r.Retransmits, r.Timeouts, formatDrops(r.Drops), check)
		}
		tw.Flush()
		return
	}
	for _, row := range detailRows(rs) {
		fmt.Fprintln(tw, " "+strings.Join(row, "\t"))
	}
	tw.Flush()
}

// detailRows returns (label, value per result) rows of mrlab's figures.
func detailRows(rs []*Result) [][]string {
	col := func(f func(r *Result) string) []string {
		out := make([]string, len(rs))
		for i, r := range rs {
			out[i] = f(r)
		}
		return out
	}
	dist := func(d func(r *Result) Dist) func(r *Result) string {
		return func(r *Result) string {
			x := d(r)
			if x.N == 0 {
				return "-"
			}
			return fmt.Sprintf("%s / %s / %s", usec(x.P50), usec(x.P99), usec(x.Max))
		}
	}
	rows := []struct {
		label string
		vals  []string
	}{
		{"lab / seed / transport", col(func(r *Result) string { return fmt.Sprintf("%s / %d / %s", r.Lab, r.Seed, r.Transport) })},
		{"virtual time", col(func(r *Result) string { return r.Elapsed.String() })},
		{"payload", col(func(r *Result) string { return r.Payload })},
		{"goodput [Gb/s]", col(func(r *Result) string { return fmt.Sprintf("%.2f", r.GoodputGbps) })},
		{"messages", col(func(r *Result) string { return fmt.Sprint(r.Messages) })},
		{"msg time p50/p99/max [us]", col(dist(func(r *Result) Dist { return r.MessageTime }))},
		{"flow time p50/p99/max [us]", col(dist(func(r *Result) Dist { return r.FlowTime }))},
		{"retransmissions", col(func(r *Result) string { return fmt.Sprint(r.Retransmits) })},
		{"spurious (lost / resent)", col(func(r *Result) string { return fmt.Sprintf("%d / %d", r.SpuriousLosses, r.EarlierArrived) })},
		{"timeouts", col(func(r *Result) string { return fmt.Sprint(r.Timeouts) })},
		{"ECN marks (fabric / rcvd)", col(func(r *Result) string { return fmt.Sprintf("%d / %d", r.ECNMarks, r.CEReceived) })},
		{"drops", col(func(r *Result) string { return formatDrops(r.Drops) })},
		{"corrupted (fabric / dropped)", col(func(r *Result) string { return fmt.Sprintf("%d / %d", r.Corrupted, r.CorruptDropped) })},
		{"duplicated (fabric / received)", col(func(r *Result) string { return fmt.Sprintf("%d / %d", r.Duplicated, r.DupReceived) })},
		{"PFC pauses", col(func(r *Result) string { return fmt.Sprint(r.PFCPauses) })},
		{"plane utilisation", col(func(r *Result) string { return formatUtil(r.PlaneUtil) })},
		{"packets sent", col(func(r *Result) string { return fmt.Sprint(r.PacketsSent) })},
		{"completion errors", col(func(r *Result) string {
			if r.Errors == 0 {
				return "0"
			}
			return fmt.Sprintf("%d (%s)", r.Errors, r.FirstError)
		})},
		{"goodput sanity", col(func(r *Result) string {
			s := &r.Sanity
			switch {
			case !s.Judged:
				return "-"
			case s.OK:
				return fmt.Sprintf("ok (%.0f%% of the %.4g Gb/s no-loss bound)", 100*s.Fraction, s.BoundGbps)
			}
			return "WARNING: " + s.Why
		})},
		{"data check", col(func(r *Result) string {
			c := &r.Check
			if c.OK {
				return fmt.Sprintf("ok (%d messages at completion, %d regions at the end)", c.Messages, c.Regions)
			}
			return fmt.Sprintf("FAILED %d of %d messages at completion, %d of %d regions at the end (%s)",
				c.Failures, c.Messages, c.BadRegions, c.Regions, c.FirstBad)
		})},
	}
	out := make([][]string, len(rows))
	for i, r := range rows {
		out[i] = append([]string{r.label}, r.vals...)
	}
	return out
}

func formatDrops(d map[string]uint64) string {
	if len(d) == 0 {
		return "0"
	}
	keys := make([]string, 0, len(d))
	for k := range d {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, d[k])
	}
	return strings.Join(parts, ", ")
}

func formatUtil(u []float64) string {
	parts := make([]string, len(u))
	for i, x := range u {
		parts[i] = fmt.Sprintf("p%d %.0f%%", i, 100*x)
	}
	return strings.Join(parts, " ")
}

// WriteComparison writes results of the same workload side by side, one
// column per result (per transport), headed by the perftest figures.
func WriteComparison(w io.Writer, rs []*Result) error {
	if len(rs) == 0 {
		return nil
	}
	var b strings.Builder
	r0 := rs[0]
	for _, r := range rs {
		if r.Hosts > 0 {
			r0 = r // one that ran, for the header
			break
		}
	}
	fmt.Fprintf(&b, "%s on %s: %d bytes x %d, %d hosts, seed %d\n", r0.Workload, r0.Lab, r0.Size, r0.Iterations, r0.Hosts, r0.Seed)
	tw := tabwriter.NewWriter(&b, 0, 0, 3, ' ', 0)
	head := []string{""}
	for _, r := range rs {
		head = append(head, r.Transport)
	}
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	row := func(label string, f func(r *Result) string) {
		cells := []string{label}
		for _, r := range rs {
			cells = append(cells, f(r))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	switch {
	case r0.Latency != nil:
		row("latency typical / avg / 99% [us]", func(r *Result) string {
			if r.Latency == nil {
				return "-"
			}
			return fmt.Sprintf("%s / %s / %s", usec(r.Latency.P50), usec(r.Latency.Mean), usec(r.Latency.P99))
		})
	case r0.AlgBWGbps > 0:
		row("algbw / busbw [Gb/s]", func(r *Result) string { return fmt.Sprintf("%.2f / %.2f", r.AlgBWGbps, r.BusBWGbps) })
	default:
		row("BW peak / average [Gb/s]", func(r *Result) string { return fmt.Sprintf("%.2f / %.2f", r.BWPeakGbps, r.BWAverageGbps) })
		row("MsgRate [Mpps]", func(r *Result) string { return fmt.Sprintf("%.6f", r.MsgRateMpps) })
	}
	for _, cells := range detailRows(rs) {
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	tw.Flush()
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSON writes v (a *Result or a []*Result) as indented JSON.
func WriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
