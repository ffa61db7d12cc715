package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/mrlab/mrlab/labs/conformudp"
	"github.com/mrlab/mrlab/transport/metaroce"
	"github.com/mrlab/mrlab/transport/metaroce/conformance"
)

func init() { register(newConformCommand) }

func newConformCommand() *cli.Command {
	return &cli.Command{
		Name:      "conform",
		Usage:     "run the MetaRoCE conformance suite against mrlab's engine or another implementation over UDP",
		ArgsUsage: " ",
		Description: "Runs packet-scripted tests of docs/metaroce-wire.md (docs/conformance.md). With --target sim\n" +
			"(the default) the implementation under test is mrlab's engine in virtual time; with\n" +
			"--target udp:ADDR[:PORT] it is whatever answers MetaRoCE there, its application side driven\n" +
			"over the control channel (mrlab conform serve runs mrlab's engine that way).\n" +
			"Exits 1 when a test fails unexpectedly (a known failure, marked xfail, does not).",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "target", Value: "sim", Usage: "implementation under test: sim or udp:ADDR[:PORT] (port default " + strconv.Itoa(conformudp.DefaultUDPPort) + ")"},
			&cli.StringFlag{Name: "run", Usage: "run only tests whose name or §SECTION matches this regular expression"},
			&cli.BoolFlag{Name: "json", Usage: "print the results as JSON"},
			&cli.BoolFlag{Name: "tap", Usage: "print the results as TAP version 13"},
			&cli.StringFlag{Name: "junit", Usage: "also write the results as JUnit XML to `FILE`"},
			&cli.BoolFlag{Name: "list", Usage: "list the tests (name, section, summary) and exit"},
			&cli.BoolFlag{Name: "progress", Usage: "print each test's result on stderr as it ends (always with --target udp:)"},
			&cli.StringFlag{Name: "scripts", Usage: "run the scripts (*.mrt) in `DIR` instead of the built-in ones"},
			&cli.BoolFlag{Name: "trace", Aliases: []string{"v"}, Usage: "print every packet both ways to stderr"},
			&cli.StringFlag{Name: "mutate", Usage: "sim only: plant these faults in the engine (comma-separated; 'list' lists them)"},
			&cli.StringFlag{Name: "control", Usage: "udp only: the IUT's control channel HOST:PORT", DefaultText: "ADDR:" + strconv.Itoa(conformance.ControlPort)},
			&cli.Float64Flag{Name: "dilation", Value: 1, Usage: "udp only: one script microsecond lasts this many wall microseconds (the IUT must agree; mrlab's agent does)"},
			&cli.DurationFlag{Name: "slack", Value: conformudp.DefaultSlack, Usage: "udp only: wall time added to every expectation's window"},
		},
		Subcommands: []*cli.Command{newConformServeCommand()},
		Action:      conformAction,
	}
}

func conformAction(c *cli.Context) error {
	if c.Args().Present() {
		return usagef("conform: unexpected argument %q", c.Args().First())
	}
	if c.Bool("json") && c.Bool("tap") {
		return usagef("conform: --json and --tap are exclusive")
	}
	if c.String("mutate") == "list" {
		for _, m := range metaroce.Mutations() {
			fmt.Fprintln(c.App.Writer, m.Name)
		}
		return nil
	}
	all, err := loadScripts(c.String("scripts"))
	if err != nil {
		return err
	}
	sel, err := conformance.Select(all, c.String("run"))
	if err != nil {
		return usagef("conform: %v", err)
	}
	if c.Bool("list") {
		for _, s := range sel {
			fmt.Fprintf(c.App.Writer, "%-30s §%-3s %s\n", s.Name, s.Section, s.Summary)
		}
		return nil
	}
	target, err := conformTarget(c)
	if err != nil {
		return err
	}
	var trace io.Writer
	if c.Bool("trace") {
		trace = c.App.ErrWriter
	}
	// A remote target runs in wall time (minutes at a high --dilation):
	// say how far it got as it goes, on stderr (stdout keeps the report,
	// whole, for --json and --tap).
	progress := io.Discard
	if _, udp := target.(*conformudp.UDPTarget); udp || c.Bool("progress") {
		progress = c.App.ErrWriter
	}
	results := runConform(target, sel, trace, progress, time.Now)
	rep := conformance.NewReport(target.Name(), results)
	if f := c.String("junit"); f != "" {
		if err := writeJUnit(f, rep); err != nil {
			return err
		}
	}
	switch {
	case c.Bool("json"):
		err = rep.WriteJSON(c.App.Writer)
	case c.Bool("tap"):
		err = rep.WriteTAP(c.App.Writer)
	default:
		err = rep.WriteText(c.App.Writer)
	}
	if err != nil {
		return err
	}
	if !rep.OK() {
		return cli.Exit(fmt.Sprintf("conform: %d of %d tests failed", rep.Failed, len(rep.Tests)), 1)
	}
	return nil
}

// runConform runs the scripts in order, as conformance.RunAll does, and
// prints each one's result to progress as it ends: "[3/140] setup-accept
// pass (1.2s, 4s so far)".
func runConform(t conformance.Target, sel []*conformance.Script, trace, progress io.Writer, now func() time.Time) []conformance.Result {
	out := make([]conformance.Result, 0, len(sel))
	start := now()
	for i, s := range sel {
		if trace != nil {
			fmt.Fprintf(trace, "=== %s (§%s)\n", s.Name, s.Section)
		}
		t0 := now()
		r := conformance.Run(t, s, trace)
		out = append(out, r)
		res := r.Result
		if r.XFail != "" {
			res += " (known failure)"
		}
		end := now()
		fmt.Fprintf(progress, "conform: [%d/%d] %s %s (%v, %v so far)\n", i+1, len(sel), s.Name, res,
			end.Sub(t0).Round(time.Millisecond), end.Sub(start).Round(time.Second))
	}
	return out
}

func loadScripts(dir string) ([]*conformance.Script, error) {
	if dir == "" {
		return conformance.Builtin()
	}
	all, err := conformance.Load(os.DirFS(dir), ".")
	if err != nil {
		return nil, fmt.Errorf("conform --scripts %s: %w", dir, err)
	}
	if len(all) == 0 {
		return nil, usagef("conform --scripts %s: no *%s files", dir, conformance.ScriptExt)
	}
	return all, nil
}

func writeJUnit(path string, rep *conformance.Report) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("conform --junit: %w", err)
	}
	if err := rep.WriteJUnit(f); err != nil {
		f.Close()
		return fmt.Errorf("conform --junit %s: %w", path, err)
	}
	return f.Close()
}

// conformTarget builds the target from the flags.
func conformTarget(c *cli.Context) (conformance.Target, error) {
	t, err := conformudp.ParseTarget(c.String("target"))
	if err != nil {
		return nil, usagef("conform --target: %v", err)
	}
	switch t := t.(type) {
	case conformance.SimTarget:
		if c.IsSet("control") || c.IsSet("dilation") || c.IsSet("slack") {
			return nil, usagef("conform: --control, --dilation and --slack are for --target udp:")
		}
		if m := c.String("mutate"); m != "" {
			set, err := parseMutations(m)
			if err != nil {
				return nil, err
			}
			t.Mutations = set
		}
		return t, nil
	case *conformudp.UDPTarget:
		if c.IsSet("mutate") {
			return nil, usagef("conform --mutate: only with --target sim")
		}
		if d := c.Float64("dilation"); d < 1 || d > 1e6 {
			return nil, usagef("conform --dilation %g: want 1..1e6", d)
		}
		t.Control, t.Dilation, t.Slack = c.String("control"), c.Float64("dilation"), c.Duration("slack")
		return t, nil
	}
	return t, nil
}

func parseMutations(s string) (metaroce.Mutation, error) {
	var set metaroce.Mutation
	for _, name := range strings.Split(s, ",") {
		found := false
		for _, m := range metaroce.Mutations() {
			if m.Name == name {
				set |= m.M
				found = true
			}
		}
		if !found {
			return 0, usagef("conform --mutate: unknown fault %q (mrlab conform --mutate list)", name)
		}
	}
	return set, nil
}

func newConformServeCommand() *cli.Command {
	return &cli.Command{
		Name:      "serve",
		Usage:     "run mrlab's MetaRoCE engine as the implementation under test for conform --target udp:",
		ArgsUsage: " ",
		Description: "Listens for MetaRoCE on UDP --port on --listen, and for the tester's control channel on TCP\n" +
			"--control-port on --control-listen. The control channel is unauthenticated and reads and\n" +
			"writes the engine's memory: it listens on loopback unless told otherwise, and warns for\n" +
			"any other address. Run it in a lab host, where only the lab's hosts reach its address\n" +
			"(mrlab exec h1 -- mrlab conform serve --control-listen H1ADDR), and the tester in another\n" +
			"(mrlab exec h0 -- mrlab conform --target udp:H1ADDR).",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "listen", Value: "0.0.0.0", Usage: "IPv4 address for MetaRoCE (UDP)"},
			&cli.StringFlag{Name: "control-listen", Value: "127.0.0.1", Usage: "IPv4 address for the control channel (TCP; anything but loopback warns: it is unauthenticated)"},
			&cli.UintFlag{Name: "port", Value: conformudp.DefaultUDPPort, Usage: "MetaRoCE UDP port"},
			&cli.UintFlag{Name: "control-port", Value: conformance.ControlPort, Usage: "control channel TCP port"},
			&cli.DurationFlag{Name: "for", Usage: "stop after this long (0: until interrupted)"},
		},
		Action: conformServe,
	}
}

func conformServe(c *cli.Context) error {
	if c.Args().Present() {
		return usagef("conform serve: unexpected argument %q", c.Args().First())
	}
	addr, err := netip.ParseAddr(c.String("listen"))
	if err != nil || !addr.Is4() {
		return usagef("conform serve --listen %q: want an IPv4 address", c.String("listen"))
	}
	port, cport := c.Uint("port"), c.Uint("control-port")
	if port == 0 || port > 65535 || cport == 0 || cport > 65535 {
		return usagef("conform serve: ports must be in 1..65535")
	}
	caddr, err := netip.ParseAddr(c.String("control-listen"))
	if err != nil || !caddr.Is4() {
		return usagef("conform serve --control-listen %q: want an IPv4 address", c.String("control-listen"))
	}
	if !caddr.IsLoopback() {
		fmt.Fprintf(c.App.ErrWriter, "warning: conform serve: the control channel on %v is unauthenticated and reads and writes the engine's memory: anyone who reaches %v:%d drives it (the default, 127.0.0.1, reaches only this host)\n",
			caddr, caddr, cport)
	}
	ln, err := net.Listen("tcp4", net.JoinHostPort(caddr.String(), strconv.Itoa(int(cport))))
	if err != nil {
		return fmt.Errorf("conform serve: %w", err)
	}
	ctx, stop := signal.NotifyContext(c.Context, os.Interrupt)
	defer stop()
	if d := c.Duration("for"); d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	a := &conformudp.Agent{Port: uint16(port), Addr: addr, Logf: func(format string, args ...any) {
		fmt.Fprintf(c.App.ErrWriter, "%s %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
	}}
	fmt.Fprintf(c.App.Writer, "serving MetaRoCE on udp %v:%d, control on tcp %v\n", addr, port, ln.Addr())
	if err := a.Serve(ctx, ln); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}
