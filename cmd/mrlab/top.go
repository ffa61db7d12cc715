package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/labs/live"
	"github.com/mrlab/mrlab/observe/telemetry"
	"github.com/mrlab/mrlab/observe/telemetry/prom"
)

// `mrlab top` shows a running live lab's busiest connections, paths and
// links, refreshed: it reads the latest telemetry snapshot from the lab's
// control socket (GET /telemetry, served by observe/telemetry/prom) or from the
// lab's Prometheus endpoint (--url).

func init() { register(newTopCommand) }

func newTopCommand() *cli.Command {
	return &cli.Command{
		Name:  "top",
		Usage: "show a live lab's busiest connections, paths and links, refreshed",
		Flags: []cli.Flag{runDirFlag(), labFlag(),
			&cli.StringFlag{Name: "url", Usage: "read the lab's telemetry endpoint at `URL` (http://127.0.0.1:PORT) instead of its control socket"},
			&cli.IntFlag{Name: "n", Value: 10, Usage: "rows per table"},
			&cli.DurationFlag{Name: "interval", Aliases: []string{"i"}, Value: time.Second, Usage: "refresh period"},
			&cli.BoolFlag{Name: "once", Usage: "print one snapshot and exit"},
			&cli.BoolFlag{Name: "json", Usage: "print one snapshot as JSON and exit"},
		},
		Action: topAction,
	}
}

func topAction(c *cli.Context) error {
	args, err := cmdArgs(c)
	if err != nil {
		return err
	}
	if len(args) > 0 {
		return usagef("top: unexpected argument %q (pick a lab with --lab)", args[0])
	}
	rows := c.Int("n")
	if rows < 1 {
		return usagef("top: -n %d: want at least one row", rows)
	}
	every := c.Duration("interval")
	if every < 100*time.Millisecond {
		return usagef("top: --interval %v: want at least 100ms", every)
	}
	fetch, label, err := topSource(c)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt, syscall.SIGTERM)
	defer stop()

	once := c.Bool("once") || c.Bool("json")
	clear := !once && isTerminal(c.App.Writer)
	for {
		snap, err := fetch(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		r := topReport(label, snap, rows, !c.Bool("json"))
		if c.Bool("json") {
			return r.WriteJSON(c.App.Writer)
		}
		if clear {
			// Home the cursor and clear the screen, as top does.
			fmt.Fprint(c.App.Writer, "\x1b[H\x1b[2J")
		}
		if err := r.WriteText(c.App.Writer); err != nil {
			return err
		}
		if once {
			return nil
		}
		if !clear {
			fmt.Fprintln(c.App.Writer)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(every):
		}
	}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// topSource returns how to fetch snapshots: over --url, or the lab's
// control socket.
func topSource(c *cli.Context) (func(context.Context) (*prom.SnapshotJSON, error), string, error) {
	if u := c.String("url"); u != "" {
		u = strings.TrimSuffix(u, "/")
		if !strings.HasSuffix(u, "/telemetry") {
			u += "/telemetry"
		}
		return func(ctx context.Context) (*prom.SnapshotJSON, error) {
			return getSnapshot(ctx, http.DefaultClient, u, u)
		}, u, nil
	}
	name, err := runningLab(c, labFlagValue(c))
	if err != nil {
		return nil, "", err
	}
	st, err := live.ReadState(c.String("run-dir"), name)
	if err != nil {
		return nil, "", err
	}
	hc := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", st.Socket)
		},
	}}
	return func(ctx context.Context) (*prom.SnapshotJSON, error) {
		return getSnapshot(ctx, hc, "http://lab/telemetry", "lab "+name)
	}, "lab " + name, nil
}

func getSnapshot(ctx context.Context, hc *http.Client, url, what string) (*prom.SnapshotJSON, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s: reading telemetry: %w", what, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return nil, fmt.Errorf("%s serves no telemetry (no /telemetry endpoint)", what)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: reading telemetry: HTTP %d", what, resp.StatusCode)
	}
	var s prom.SnapshotJSON
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&s); err != nil {
		return nil, fmt.Errorf("%s: decoding telemetry: %w", what, err)
	}
	return &s, nil
}

// topReport ranks a snapshot: connections and paths by delivery rate (then
// send rate), links by utilization (then queue). human formats rates,
// sizes and times for the screen; otherwise cells are plain numbers (bit/s,
// bytes, ns) for JSON.
func topReport(label string, s *prom.SnapshotJSON, n int, human bool) *Report {
	rate := func(r float64) any {
		if human {
			return rateText(r)
		}
		return r
	}
	size := func(b int64) any {
		if human {
			return bytesText(b)
		}
		return b
	}
	dur := func(t sim.Time) any {
		if human {
			return timeText(t)
		}
		return int64(t)
	}
	var conns, paths, links []*telemetry.Sample
	for i := range s.Samples {
		x := &s.Samples[i]
		switch x.Kind {
		case telemetry.KindConn:
			conns = append(conns, x)
		case telemetry.KindPath:
			paths = append(paths, x)
		case telemetry.KindLink:
			links = append(links, x)
		}
	}
	busiest := func(a, b *telemetry.Sample) int {
		return cmp.Or(cmp.Compare(b.Rate, a.Rate), cmp.Compare(b.SendRate, a.SendRate), cmp.Compare(a.Host, b.Host),
			cmp.Compare(a.Conn, b.Conn), cmp.Compare(a.Path, b.Path))
	}
	slices.SortFunc(conns, busiest)
	slices.SortFunc(paths, busiest)
	slices.SortFunc(links, func(a, b *telemetry.Sample) int {
		return cmp.Or(cmp.Compare(b.Util, a.Util), cmp.Compare(b.QueueBytes, a.QueueBytes), cmp.Compare(a.Link, b.Link))
	})
	r := &Report{}
	r.Fact("source", "source", label)
	r.Fact("lab_time", "lab time", s.TimeNS.String())
	r.Fact("connections", "connections", len(conns))
	ct := r.Table("conns", fmt.Sprintf("Busiest connections (of %d)", len(conns)),
		Col("host", "host", ""), Col("peer", "peer", ""), Col("conn", "conn", ""), Col("transport", "transport", ""),
		Col("rate", "rate", ""), Col("send", "send", ""), Col("cwnd", "cwnd", ""), Col("inflight", "in flight", ""),
		Col("srtt", "srtt", ""), Col("rto", "rto", ""), Col("ecn", "ECN %", "%.1f"), Col("hint", "rate hint", ""),
		Col("retx", "retx", ""), Col("entropy_changes", "re-paths", ""))
	for _, x := range conns[:min(n, len(conns))] {
		hint := rate(x.RateHint)
		if human && x.RateHint == 0 {
			hint = "-"
		}
		ct.Add(x.Host, x.Peer, x.Conn, x.Transport, rate(x.Rate), rate(x.SendRate),
			size(x.Cwnd), size(x.InFlight), dur(x.SRTT), dur(x.RTO), 100*x.ECNFraction, hint,
			x.Retransmits, x.EntropyChanges)
	}
	pt := r.Table("paths", fmt.Sprintf("Busiest paths (of %d)", len(paths)),
		Col("host", "host", ""), Col("conn", "conn", ""), Col("path", "path", ""), Col("plane", "plane", ""),
		Col("entropy", "entropy", ""), Col("state", "state", ""), Col("rate", "rate", ""), Col("cwnd", "cwnd", ""),
		Col("srtt", "srtt", ""), Col("ecn", "ECN %", "%.1f"), Col("retx", "retx", ""), Col("entropy_changes", "re-paths", ""))
	for _, x := range paths[:min(n, len(paths))] {
		pt.Add(x.Host, x.Conn, x.Path, x.Plane, x.Entropy, x.State, rate(x.Rate), size(x.Cwnd),
			dur(x.SRTT), 100*x.ECNFraction, x.Retransmits, x.EntropyChanges)
	}
	lt := r.Table("links", fmt.Sprintf("Busiest link directions (of %d)", len(links)),
		Col("link", "link", ""), Col("util", "util %", "%.1f"), Col("queue", "queue", ""), Col("tx_packets", "packets", ""),
		Col("drops", "drops", ""), Col("marks", "CE marks", ""))
	for _, x := range links[:min(n, len(links))] {
		lt.Add(x.Link, 100*x.Util, size(x.QueueBytes), x.TxPackets, x.Drops, x.Marks)
	}
	return r
}

func bytesText(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1fMiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1fKiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%dB", n)
}

func timeText(t sim.Time) string {
	if t == 0 {
		return "-"
	}
	// Three significant digits are plenty on a screen.
	switch {
	case t >= sim.Second:
		return fmt.Sprintf("%.3gs", t.Seconds())
	case t >= sim.Millisecond:
		return fmt.Sprintf("%.3gms", float64(t)/float64(sim.Millisecond))
	case t >= sim.Microsecond:
		return fmt.Sprintf("%.3gus", t.Micros())
	}
	return t.String()
}

// rateText prints a measured rate with three significant digits.
func rateText(r float64) string {
	switch {
	case r >= 1e9:
		return fmt.Sprintf("%.3gG", r/1e9)
	case r >= 1e6:
		return fmt.Sprintf("%.3gM", r/1e6)
	case r >= 1e3:
		return fmt.Sprintf("%.3gK", r/1e3)
	case r == 0:
		return "0"
	}
	return fmt.Sprintf("%.3g", r)
}
