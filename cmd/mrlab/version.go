package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/urfave/cli/v2"
)

func init() {
	register(newVersionCommand)
	cli.VersionFlag = &cli.BoolFlag{Name: "version", Usage: "print mrlab's version and exit"}
	cli.VersionPrinter = func(c *cli.Context) { fmt.Fprintln(c.App.Writer, "mrlab", c.App.Version) }
}

// versionString describes this binary from its build information: the
// module version (a tag, a pseudo-version, or "(devel)" for a build from a
// checkout), the VCS revision and time it was built from (go build stamps
// them; go run does not), whether the tree had local changes, and the Go
// toolchain.
func versionString() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(unknown: no build information)"
	}
	return formatVersion(bi)
}

func formatVersion(bi *debug.BuildInfo) string {
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev, when string
	modified := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			when = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	out := v
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		out += " rev " + rev
		if when != "" {
			out += " (" + when + ")"
		}
		if modified {
			out += " +local changes"
		}
	}
	goVersion := bi.GoVersion
	if goVersion == "" {
		goVersion = runtime.Version()
	}
	return fmt.Sprintf("%s %s %s/%s", out, goVersion, runtime.GOOS, runtime.GOARCH)
}

func newVersionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print mrlab's version: module version, VCS revision, Go version",
		Action: func(c *cli.Context) error {
			if c.Args().Present() {
				return usagef("version: unexpected argument %q", c.Args().First())
			}
			fmt.Fprintln(c.App.Writer, "mrlab", c.App.Version)
			return nil
		},
	}
}
