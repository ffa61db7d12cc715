package main

import (
	"encoding/json"
	"fmt"
	"os/user"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/mrlab/mrlab/labs/live"
)

// `mrlab ls` lists the running labs of this machine: which one a command
// without --lab would pick, and whose each is.
func init() { register(newLsCommand) }

// lsEntry is one running lab as ls reports it.
type lsEntry struct {
	Lab     string `json:"lab"`
	Owner   int    `json:"owner"`
	User    string `json:"user,omitempty"`
	Hosts   int    `json:"hosts"`
	PID     int    `json:"pid"`
	Uptime  string `json:"uptime"`
	Alive   bool   `json:"alive"`
	Metrics string `json:"metrics,omitempty"`
	Mine    bool   `json:"mine"`
}

func newLsCommand() *cli.Command {
	return &cli.Command{
		Name:  "ls",
		Usage: "list running live labs: name, owner, hosts, uptime, metrics URL",
		Description: "A lab's owner is the user who ran mrlab up (SUDO_UID through sudo). Commands\n" +
			"without --lab act on your own lab only, and refuse when you have several.\n" +
			"A lab whose process died shows as stale: mrlab down LAB cleans it up.",
		Flags: []cli.Flag{runDirFlag(), &cli.BoolFlag{Name: "json", Usage: "print a JSON array"}},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("ls: unexpected argument %q", c.Args().First())
			}
			labs, err := runningLabs(c.String("run-dir"))
			if err != nil {
				return fmt.Errorf("ls: %w", err)
			}
			uid := live.CallerUID()
			out := make([]lsEntry, 0, len(labs))
			for _, l := range labs {
				e := lsEntry{Lab: l.name, Owner: l.owner, Mine: l.owner == uid}
				if u, err := user.LookupId(strconv.Itoa(l.owner)); err == nil && l.owner >= 0 {
					e.User = u.Username
				}
				if st := l.state; st != nil {
					e.Hosts, e.PID = len(st.Hosts), st.PID
					e.Alive = live.SystemOps{}.ProcessAlive(st.PID, st.StartTicks)
					e.Uptime = time.Since(st.Started).Round(time.Second).String()
					if st.Metrics != "" {
						e.Metrics = metricsURL(st.Metrics)
					}
				}
				out = append(out, e)
			}
			if c.Bool("json") {
				enc := json.NewEncoder(c.App.Writer)
				enc.SetIndent("", "  ")
				return enc.Encode(out)
			}
			if len(out) == 0 {
				fmt.Fprintln(c.App.Writer, "no lab is running")
				return nil
			}
			tw := tabwriter.NewWriter(c.App.Writer, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "LAB\tOWNER\tHOSTS\tPID\tUPTIME\tMETRICS")
			for _, e := range out {
				owner := strconv.Itoa(e.Owner)
				if e.User != "" {
					owner = e.User
				}
				if e.Mine {
					owner += " (you)"
				}
				up := e.Uptime
				if !e.Alive {
					up = "stale (process gone)"
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\n", e.Lab, owner, e.Hosts, e.PID, up, e.Metrics)
			}
			return tw.Flush()
		},
	}
}
