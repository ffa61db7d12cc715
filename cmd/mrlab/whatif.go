package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/mrlab/mrlab/labs"
)

// What-ifs from the command line: --set, --impair and --fault change the
// lab the way editing its file would, and are checked the same way; a
// mistake names the flag.

const whatIfCategory = "what-if (change the lab without editing it)"

// repeated collects a flag given several times, each value whole (commas
// and all: a netem string or a YAML flow mapping has commas).
type repeated struct{ vals []string }

// Set implements cli.Generic.
func (r *repeated) Set(s string) error { r.vals = append(r.vals, s); return nil }

// String implements cli.Generic.
func (r *repeated) String() string { return strings.Join(r.vals, " ") }

func whatIfFlags() []cli.Flag {
	return []cli.Flag{
		&cli.GenericFlag{Name: "set", Value: &repeated{}, Category: whatIfCategory,
			Usage: "set any lab-file key: `KEY=VALUE` with KEY a dotted path (links.default.rate=10gbit, topology.leafspine.planes=4, faults[0].at=2ms) and VALUE YAML; repeatable"},
		&cli.GenericFlag{Name: "impair", Value: &repeated{}, Category: whatIfCategory,
			Usage: "impair links, netem spelling: `TARGET=NETEM` with TARGET a link (LINK, LINK:ab, LINK:ba), all, host, fabric or plane:N (impair 'plane:1=loss 1%'); repeatable"},
		&cli.GenericFlag{Name: "fault", Value: &repeated{}, Category: whatIfCategory,
			Usage: "add a fault: `'AT TARGET NAME ACTION [NETEM] [dir ab|ba]'` as the lab file's fault entries read ('2ms plane 1 down', '1ms link h0-p0 impair loss 5%'); repeatable; armed even with --no-faults"},
	}
}

// flagValues returns the values a repeated flag was given.
func flagValues(c *cli.Context, name string) []string {
	if r, ok := c.Generic(name).(*repeated); ok && r != nil {
		return r.vals
	}
	return nil
}

// labOverrides reads --set, --impair and --fault, in that order, and
// returns them with how many faults they add to the timeline.
func labOverrides(c *cli.Context) ([]labs.Override, int, error) {
	ovs, err := labs.ParseOverrides(flagValues(c, "set"), flagValues(c, "impair"), flagValues(c, "fault"))
	if err != nil {
		return nil, 0, usageError{err}
	}
	faults := 0
	for _, o := range ovs {
		faults += o.Faults
	}
	return ovs, faults, nil
}

// resolveWithOverrides resolves the lab argument with the command's
// what-if flags applied, if it has them. A problem in what a flag wrote
// is a usage error naming the flag; --no-faults keeps the faults the
// flags added.
func resolveWithOverrides(c *cli.Context, arg string) (*labs.Lab, error) {
	if findFlag(c.Command.Flags, "set") == nil {
		return labs.Resolve(arg)
	}
	ovs, flagFaults, err := labOverrides(c)
	if err != nil {
		return nil, err
	}
	lab, err := labs.ResolveWith(arg, ovs)
	if err != nil {
		for _, e := range labs.Errors(err) {
			if e.Flag != "" {
				return nil, usageError{err}
			}
		}
		var u usageError
		if len(ovs) > 0 && !errors.As(err, &u) && strings.HasPrefix(err.Error(), "--") {
			return nil, usageError{err} // an edit that could not be made
		}
		return nil, err
	}
	if c.Bool("no-faults") {
		lab.Faults = lab.Faults[len(lab.Faults)-flagFaults:]
	}
	return lab, nil
}

// describeOverrides lists the what-ifs applied, for reports.
func describeOverrides(c *cli.Context) string {
	var parts []string
	for _, f := range []string{"set", "impair", "fault"} {
		for _, v := range flagValues(c, f) {
			parts = append(parts, fmt.Sprintf("--%s %q", f, v))
		}
	}
	return strings.Join(parts, " ")
}
