package main

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/labs"
)

func init() { register(newLabCommand) }

func newLabCommand() *cli.Command {
	return &cli.Command{
		Name:  "lab",
		Usage: "check, show and list lab files",
		Description: "A lab is a YAML file (or a built-in name: see mrlab lab list) describing a\n" +
			"topology, link parameters, impairments and a fault timeline.",
		Subcommands: []*cli.Command{
			{
				Name:      "validate",
				Usage:     "check lab files and report every problem with file:line:col and field",
				ArgsUsage: "FILE|NAME...",
				Action:    labValidate,
			},
			{
				Name:      "show",
				Usage:     "summarize a lab: hosts, switches, links, planes, faults",
				ArgsUsage: "[FILE|NAME]",
				Flags: append([]cli.Flag{
					&cli.BoolFlag{Name: "dot", Usage: "print a Graphviz graph instead (render with dot -Tsvg)"},
					&cli.BoolFlag{Name: "links", Usage: "list every link, not just groups of alike links"},
					&cli.BoolFlag{Name: "json", Usage: "print one JSON object"},
				}, whatIfFlags()...), // the lab as sim --set/--impair/--fault would run it
				Action: labShow,
			},
			{
				Name:   "list",
				Usage:  "list the built-in labs",
				Flags:  []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print one JSON object"}},
				Action: labList,
			},
		},
	}
}

func labValidate(c *cli.Context) error {
	args, err := cmdArgs(c)
	if err != nil {
		return err
	}
	if len(args) == 0 {
		return usagef("lab validate: want one or more lab files")
	}
	failed := 0
	for _, arg := range args {
		lab, err := labs.Resolve(arg)
		if err != nil {
			failed++
			if errs := labs.Errors(err); len(errs) > 0 {
				for _, e := range errs {
					fmt.Fprintln(c.App.ErrWriter, e)
				}
			} else {
				fmt.Fprintln(c.App.ErrWriter, err)
			}
			continue
		}
		printWarnings(c, lab)
		s := lab.Summary()
		fmt.Fprintf(c.App.Writer, "%s: ok: %s, %d hosts, %d switches, %d links, %d planes, %d faults\n",
			lab.File, lab.Name, s.Hosts, s.Switches, s.Links, s.Planes, s.Faults)
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d labs have errors", failed, len(args))
	}
	return nil
}

// oneLab resolves the command's optional single lab argument.
func oneLab(c *cli.Context) (*labs.Lab, error) {
	args, err := cmdArgs(c)
	if err != nil {
		return nil, err
	}
	if len(args) > 1 {
		return nil, usagef("%s: want at most one lab, got %d (%s)", c.Command.Name, len(args), strings.Join(args, " "))
	}
	arg := ""
	if len(args) == 1 {
		arg = args[0]
	}
	lab, err := resolveWithOverrides(c, arg)
	if err == nil {
		printWarnings(c, lab)
	}
	return lab, err
}

// printWarnings prints a lab's warnings (valid but probably unmeant
// settings) on stderr.
func printWarnings(c *cli.Context, lab *labs.Lab) {
	for _, w := range lab.Warnings {
		fmt.Fprintf(c.App.ErrWriter, "mrlab: warning: %v\n", w)
	}
}

func labShow(c *cli.Context) error {
	lab, err := oneLab(c)
	if err != nil {
		return err
	}
	if c.Bool("dot") {
		return lab.WriteDot(c.App.Writer)
	}
	r := showReport(lab, c.Bool("links"))
	if c.Bool("json") {
		return r.WriteJSON(c.App.Writer)
	}
	return r.WriteText(c.App.Writer)
}

// showReport summarizes a lab: its facts, then tables of its hosts,
// switches, links (each one with allLinks, alike ones grouped without)
// and faults.
func showReport(lab *labs.Lab, allLinks bool) *Report {
	topo := lab.Topology()
	r := &Report{}
	labFacts(r, lab)
	ht := r.Table("host_list", "Hosts", Col("name", "host", ""), Col("addr", "address", ""), Col("ports", "ports", ""))
	for _, h := range topo.Hosts {
		ht.Add(h.Name, h.Addr.String(), h.Ports)
	}
	switchTable(r, topo)
	if allLinks {
		linkTable(r, topo)
	} else {
		linkGroupTable(r, topo)
	}
	faultTable(r, lab)
	return r
}

// labFacts adds a lab's facts: name, file, seed, transport, the topology's
// counts and the failure detection delay.
func labFacts(r *Report, lab *labs.Lab) {
	s := lab.Summary()
	r.Fact("lab", "lab", lab.Name)
	if lab.Description != "" {
		r.Fact("description", "description", lab.Description)
	}
	r.Fact("file", "file", lab.File)
	r.Fact("seed", "seed", lab.Seed)
	r.Fact("transport", "transport", lab.Transport.String())
	r.Fact("topology", "topology", lab.Builder)
	r.Fact("planes", "planes", s.Planes)
	r.Fact("hosts", "hosts", s.Hosts)
	var roles []string
	for _, role := range s.Roles() {
		roles = append(roles, fmt.Sprintf("%d %s", s.SwitchesByRole[role], role))
	}
	if len(roles) > 0 {
		r.Fact("switches", "switches", fmt.Sprintf("%d (%s)", s.Switches, strings.Join(roles, ", ")))
	} else {
		r.Fact("switches", "switches", "0")
	}
	r.Fact("links", "links", fmt.Sprintf("%d (%d host, %d fabric)", s.Links, s.HostLinks, s.Links-s.HostLinks))
	switch {
	case lab.DetectionDelay < 0:
		r.Fact("detection_delay", "failure detection", "at once")
	case lab.DetectionDelay == 0:
		r.Fact("detection_delay", "failure detection", fabric.DefaultDetectionDelay.String()+" (default)")
	default:
		r.Fact("detection_delay", "failure detection", lab.DetectionDelay)
	}

	r.Fact("transports", "transports", formatTransports(lab.Transports))
}

// switchTable adds the switches, a row per plane and role.
func switchTable(r *Report, topo *fabric.Topology) {
	st := r.Table("switch_list", "Switches", Col("plane", "plane", ""), Col("role", "role", ""), Col("count", "count", ""), Col("names", "names", ""))
	type group struct {
		plane int
		role  string
	}
	groups := map[group][]string{}
	for _, sw := range topo.Switches {
		g := group{sw.Plane, sw.Role}
		groups[g] = append(groups[g], sw.Name)
	}
	gkeys := make([]group, 0, len(groups))
	for g := range groups {
		gkeys = append(gkeys, g)
	}
	sort.Slice(gkeys, func(i, j int) bool {
		if gkeys[i].plane != gkeys[j].plane {
			return gkeys[i].plane < gkeys[j].plane
		}
		return gkeys[i].role < gkeys[j].role
	})
	for _, g := range gkeys {
		st.Add(g.plane, g.role, len(groups[g]), elide(groups[g], 6))
	}
}

// linkTable adds every link, a row each.
func linkTable(r *Report, topo *fabric.Topology) {
	lt := r.Table("link_list", "Links", Col("name", "link", ""), Col("a", "a", ""), Col("b", "b", ""),
		Col("rate", "rate", ""), Col("delay", "delay", ""), Col("queue", "queue", ""), Col("ecn", "ecn", ""), Col("pfc", "pfc", ""), Col("impair", "impair", ""))
	for _, k := range topo.Links {
		p := k.Params
		lt.Add(k.Name, endpoint(k.A), endpoint(k.B), fabric.FormatRate(p.Rate), p.Delay, labs.FormatSize(p.QueueBytes), formatECN(p.ECN), formatPFC(p.PFC), formatImpair(p.Impair))
	}
}

// linkGroupTable adds the links with alike links (same class, host or
// fabric, and parameters) sharing a row, so a 64-host lab's summary stays
// short and overrides stand out.
func linkGroupTable(r *Report, topo *fabric.Topology) {
	hosts := map[string]bool{}
	for _, h := range topo.Hosts {
		hosts[h.Name] = true
	}
	class := func(k fabric.Link) string {
		if hosts[k.A.Node] || hosts[k.B.Node] {
			return "host"
		}
		return "fabric"
	}
	lt := r.Table("link_groups", "Links (alike links grouped; --links lists each)", Col("class", "class", ""), Col("count", "count", ""),
		Col("rate", "rate", ""), Col("delay", "delay", ""), Col("queue", "queue", ""), Col("ecn", "ecn", ""), Col("pfc", "pfc", ""), Col("impair", "impair", ""), Col("names", "names", ""))
	type lg struct {
		class  string
		params fabric.LinkParams
	}
	var order []lg
	members := map[lg][]string{}
	for _, k := range topo.Links {
		g := lg{class(k), k.Params}
		if _, seen := members[g]; !seen {
			order = append(order, g)
		}
		members[g] = append(members[g], k.Name)
	}
	for _, g := range order {
		p := g.params
		lt.Add(g.class, len(members[g]), fabric.FormatRate(p.Rate), p.Delay, labs.FormatSize(p.QueueBytes), formatECN(p.ECN), formatPFC(p.PFC), formatImpair(p.Impair), elide(members[g], 3))
	}
}

// faultTable adds the lab's faults in time order.
func faultTable(r *Report, lab *labs.Lab) {
	ft := r.Table("faults", "Faults", Col("at", "at", ""), Col("target", "target", ""), Col("action", "action", ""), Col("impair", "impair", ""), Col("line", "line", ""))
	faults := append([]labs.Fault(nil), lab.Faults...)
	sort.SliceStable(faults, func(i, j int) bool { return faults[i].At < faults[j].At })
	for _, f := range faults {
		imp := ""
		if f.Action == labs.ActionImpair {
			imp = f.ImpairText
			if f.Dir != labs.DirBoth {
				imp += " (" + f.Dir.String() + " only)"
			}
		}
		var line any = f.Line
		if f.Line == 0 {
			line = "-" // from a --fault or --impair flag
		}
		ft.Add(f.At, f.Subject(), f.Action.String(), imp, line)
	}
}

func endpoint(e fabric.Endpoint) string { return e.Node + ":" + strconv.Itoa(e.Port) }

func formatECN(e fabric.ECNConfig) string {
	switch e.Mode {
	case fabric.ECNStep:
		return "step " + labs.FormatSize(e.K)
	case fabric.ECNRED:
		s := fmt.Sprintf("red %s-%s pmax %g", labs.FormatSize(e.Min), labs.FormatSize(e.Max), e.PMax)
		if e.Weight > 0 {
			s += fmt.Sprintf(" w %g", e.Weight)
		}
		return s
	}
	return "off"
}

func formatPFC(c fabric.PFCConfig) string {
	if !c.Enabled() {
		return "off"
	}
	return fmt.Sprintf("xoff %s xon %s", labs.FormatSize(c.XOff), labs.FormatSize(c.XOn))
}

// formatTransports spells out what the lab's transports section sets
// (the settings comparisons hinge on), "defaults" when nothing.
func formatTransports(t labs.Transports) string {
	var parts []string
	if p := t.MetaRoCE.Paths; p > 0 {
		parts = append(parts, fmt.Sprintf("metaroce paths %d", p))
	}
	if h := t.MetaRoCE.HintUtilization; h > 0 {
		parts = append(parts, fmt.Sprintf("metaroce hint_utilization %g", h))
	}
	switch r := t.RoCEv2; {
	case r.AckTimeout > 0:
		parts = append(parts, "rocev2 ack_timeout "+r.AckTimeout.String())
	case r.Timeout > 0:
		parts = append(parts, fmt.Sprintf("rocev2 ack_timeout %d (4.096us x 2^%d)", r.Timeout, r.Timeout))
	}
	if t.RoCEv2.NoDCQCN {
		parts = append(parts, "rocev2 dcqcn off")
	} else if t.RoCEv2.DCQCN.G != 0 {
		parts = append(parts, "rocev2 dcqcn (own constants)")
	}
	switch q := t.RoCEv2QPs; {
	case q == labs.PerPlane:
		parts = append(parts, "rocev2 qps_per_peer per-plane")
	case q > 0:
		parts = append(parts, fmt.Sprintf("rocev2 qps_per_peer %d", q))
	}
	if len(parts) == 0 {
		return "defaults"
	}
	return strings.Join(parts, ", ")
}

func formatImpair(i fabric.Impairment) string {
	if i.IsZero() {
		return "none"
	}
	return i.String()
}

// elide lists names, keeping the first n.
func elide(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, " ")
	}
	return strings.Join(names[:n], " ") + fmt.Sprintf(" ... (+%d)", len(names)-n)
}

func labList(c *cli.Context) error {
	if args, err := cmdArgs(c); err != nil {
		return err
	} else if len(args) > 0 {
		return usagef("lab list: takes no arguments")
	}
	r := &Report{}
	t := r.Table("labs", "Built-in labs (run one with: mrlab sim NAME)", Col("name", "name", ""), Col("hosts", "hosts", ""),
		Col("switches", "switches", ""), Col("planes", "planes", ""), Col("default", "default", ""), Col("description", "description", ""))
	for _, name := range labs.Names() {
		lab, err := labs.Builtin(name)
		if err != nil {
			return fmt.Errorf("built-in lab %s: %w", name, err)
		}
		s := lab.Summary()
		t.Add(name, s.Hosts, s.Switches, s.Planes, name == labs.DefaultName, lab.Description)
	}
	if c.Bool("json") {
		return r.WriteJSON(c.App.Writer)
	}
	return r.WriteText(c.App.Writer)
}
