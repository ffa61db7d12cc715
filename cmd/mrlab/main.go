// Command mrlab runs a MetaRoCE cluster on one Linux box: it checks and
// shows lab files, runs labs in virtual time (sim), and — as other
// commands land — in real network namespaces.
//
// Commands live in their own files. Each file registers its commands from
// init:
//
//	func init() { register(newFooCommand) }
//
// register takes constructors rather than commands so that every App (the
// binary's one, and each in-process test's) gets fresh cli.Command values.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"
)

// commands are the registered command constructors.
var commands []func() *cli.Command

// register adds top-level commands to the CLI.
func register(c ...func() *cli.Command) { commands = append(commands, c...) }

// usageError is a mistake in how mrlab was called (exit status 2), as
// opposed to a failure of what it was asked to do (exit status 1).
type usageError struct{ err error }

// Error returns the underlying message.
func (e usageError) Error() string { return e.err.Error() }

// Unwrap returns the underlying error.
func (e usageError) Unwrap() error { return e.err }

// usagef returns a usageError.
func usagef(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// newApp builds the CLI writing to stdout and stderr.
func newApp(stdout, stderr io.Writer) *cli.App {
	cmds := make([]*cli.Command, 0, len(commands))
	for _, mk := range commands {
		cmds = append(cmds, mk())
	}
	sort.Slice(cmds, func(i, j int) bool { return cmds[i].Name < cmds[j].Name })
	for _, c := range cmds {
		markUsage(c)
	}
	app := &cli.App{
		Name:     "mrlab",
		Usage:    "run a MetaRoCE cluster on one Linux box",
		Commands: cmds,
		Writer:   stdout,
		// ErrWriter also decides whether progress bars are drawn: only
		// when it is a terminal.
		ErrWriter: stderr,
		// Errors are printed once, by run, with the right exit status.
		ExitErrHandler: func(*cli.Context, error) {},
		OnUsageError: func(_ *cli.Context, err error, _ bool) error {
			return usageError{err}
		},
		Action: func(c *cli.Context) error {
			if c.Args().Present() {
				return usagef("unknown command %q (see mrlab help)", c.Args().First())
			}
			return cli.ShowAppHelp(c)
		},
		HideVersion:          true,
		EnableBashCompletion: true,
	}
	return app
}

// markUsage makes flag-parsing errors of c and its subcommands usage
// errors, and unknown subcommands of a command group an error too.
func markUsage(c *cli.Command) {
	if c.OnUsageError == nil {
		c.OnUsageError = func(_ *cli.Context, err error, _ bool) error { return usageError{err} }
	}
	if len(c.Subcommands) > 0 && c.Action == nil {
		name := c.Name
		c.Action = func(ctx *cli.Context) error {
			if ctx.Args().Present() {
				return usagef("unknown command %q for %s (see mrlab %s help)", ctx.Args().First(), name, name)
			}
			return cli.ShowSubcommandHelp(ctx)
		}
	}
	for _, s := range c.Subcommands {
		markUsage(s)
	}
}

// run runs mrlab with args (args[0] is the program name) and returns the
// exit status: 0, 1 for a failure, 2 for a usage error.
func run(args []string, stdout, stderr io.Writer) int {
	err := newApp(stdout, stderr).Run(args)
	if err == nil {
		return 0
	}
	fmt.Fprintf(stderr, "mrlab: %v\n", err)
	var u usageError
	if errors.As(err, &u) {
		return 2
	}
	var ec cli.ExitCoder
	if errors.As(err, &ec) && ec.ExitCode() != 0 {
		return ec.ExitCode()
	}
	return 1
}

func main() { os.Exit(run(os.Args, os.Stdout, os.Stderr)) }

// cmdArgs returns c's positional arguments, applying any flags written
// after them: urfave/cli v2 stops parsing flags at the first positional
// argument, but "mrlab sim lab.yaml --seed 2" is how people type. "--"
// ends flags; what follows is positional.
func cmdArgs(c *cli.Context) ([]string, error) {
	var pos []string
	args := c.Args().Slice()
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if len(a) < 2 || a[0] != '-' || isNumeral(a) {
			// A negative number ("fault plane -1") is an argument: no
			// flag is named by digits.
			pos = append(pos, a)
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		f := findFlag(c.Command.Flags, name)
		if f == nil {
			return nil, usagef("%s: flag provided but not defined: %s", c.Command.Name, a)
		}
		takesValue := true
		if tv, ok := f.(interface{ TakesValue() bool }); ok {
			takesValue = tv.TakesValue()
		}
		switch {
		case hasValue:
		case !takesValue:
			value = "true"
		case i+1 < len(args):
			i++
			value = args[i]
		default:
			return nil, usagef("%s: flag needs an argument: %s", c.Command.Name, a)
		}
		// Set under the flag's first name: urfave/cli reads a flag set
		// through an alias only under that alias.
		if err := c.Set(f.Names()[0], value); err != nil {
			return nil, usagef("%s: invalid value %q for flag %s: %v", c.Command.Name, value, a, err)
		}
	}
	return pos, nil
}

func findFlag(flags []cli.Flag, name string) cli.Flag {
	for _, f := range flags {
		for _, n := range f.Names() {
			if n == name {
				return f
			}
		}
	}
	return nil
}

// isNumeral reports whether s parses as a number ("-1", "-0.5").
func isNumeral(s string) bool {
	_, err := strconv.ParseFloat(s, 64)
	return err == nil
}
