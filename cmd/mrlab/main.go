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

	"github.com/mrlab/mrlab/labs"
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
		markUsage(c, "mrlab")
	}
	cmds = append(cmds, newHelpCommand(nil, "mrlab"))
	app := &cli.App{
		Name:     "mrlab",
		Usage:    "run a MetaRoCE cluster on one Linux box",
		Version:  versionString(),
		Commands: cmds,
		Writer:   stdout,
		// ErrWriter also decides whether progress bars are drawn: only
		// when it is a terminal.
		ErrWriter: stderr,
		// Errors are printed once, by run, with the right exit status.
		ExitErrHandler: func(*cli.Context, error) {},
		OnUsageError: func(c *cli.Context, err error, _ bool) error {
			return usageError{withFlagSuggestion(err, c.App.Flags)}
		},
		Action: func(c *cli.Context) error {
			if c.Args().Present() {
				return unknownCommand(c.Args().First(), "mrlab", c.App.Commands)
			}
			return cli.ShowAppHelp(c)
		},
		HideHelpCommand:      true, // newHelpCommand instead
		EnableBashCompletion: true,
	}
	return app
}

// unknownCommand is the usage error for a command name that is not one of
// cmds (the commands of group, "mrlab" or "mrlab lab"...).
func unknownCommand(name, group string, cmds []*cli.Command) error {
	var names []string
	for _, c := range cmds {
		names = append(names, c.Names()...)
	}
	hint := "see " + group + " help"
	if best, ok := labs.Closest(name, names); ok {
		hint = "did you mean " + group + " " + best + "?"
	}
	return usagef("unknown command %q for %s (%s)", name, group, hint)
}

// withFlagSuggestion adds "did you mean --x?" to a "flag provided but not
// defined" error when one of flags is close to the name given.
func withFlagSuggestion(err error, flags []cli.Flag) error {
	const undefined = "flag provided but not defined: "
	msg := err.Error()
	i := strings.Index(msg, undefined)
	if i < 0 {
		return err
	}
	given := strings.TrimLeft(strings.Fields(msg[i+len(undefined):])[0], "-")
	given, _, _ = strings.Cut(given, "=")
	var names []string
	for _, f := range flags {
		names = append(names, f.Names()...)
	}
	best, ok := labs.Closest(given, names)
	// Every one-letter flag is one edit from every other: suggest one
	// only for a different case (-d for -D), not -s for perftest's -H.
	if !ok || len(given) == 1 && !strings.EqualFold(given, best) {
		return err
	}
	dashes := "--"
	if len(best) == 1 {
		dashes = "-"
	}
	return fmt.Errorf("%w (did you mean %s%s?)", err, dashes, best)
}

// groupHelpTemplate is urfave/cli's subcommand help with the commands
// listed from VisibleCommands: its own template lists them by category,
// which stays empty until the group has run, so `mrlab help lab` showed
// none.
var groupHelpTemplate = strings.Replace(cli.SubcommandHelpTemplate,
	`{{template "visibleCommandCategoryTemplate" .}}`, `{{template "visibleCommandTemplate" .}}`, 1)

// markUsage makes flag-parsing errors of c and its subcommands usage
// errors (with a suggestion for a mistyped flag), unknown subcommands of a
// command group an error too, and gives groups a help that lists their
// commands. parent is the command line above c ("mrlab").
func markUsage(c *cli.Command, parent string) {
	full := parent + " " + c.Name
	if c.OnUsageError == nil {
		flags := c.Flags
		c.OnUsageError = func(_ *cli.Context, err error, _ bool) error {
			return usageError{withFlagSuggestion(err, flags)}
		}
	}
	if len(c.Subcommands) > 0 {
		c.CustomHelpTemplate = groupHelpTemplate
		c.HideHelpCommand = true
		for _, s := range c.Subcommands {
			markUsage(s, full)
		}
		c.Subcommands = append(c.Subcommands, newHelpCommand(c, full))
		if c.Action == nil {
			subs := c.Subcommands
			c.Action = func(ctx *cli.Context) error {
				if ctx.Args().Present() {
					return unknownCommand(ctx.Args().First(), full, subs)
				}
				return cli.ShowSubcommandHelp(ctx)
			}
		}
	}
}

// newHelpCommand is `help [COMMAND...]` for the app (group nil) or a
// command group: it lists the commands, or shows one command's help, a
// group's with its subcommands. An unknown name is a usage error with a
// suggestion.
func newHelpCommand(group *cli.Command, prefix string) *cli.Command {
	return &cli.Command{
		Name: "help", Aliases: []string{"h"}, ArgsUsage: "[COMMAND [SUBCOMMAND]]",
		Usage: "list the commands, or show one command's help",
		Action: func(c *cli.Context) error {
			cmds := c.App.Commands
			if group != nil {
				cmds = group.Subcommands
			}
			var cmd *cli.Command
			path := prefix
			for _, name := range c.Args().Slice() {
				var found *cli.Command
				for _, x := range cmds {
					if x.HasName(name) {
						found = x
					}
				}
				if found == nil {
					return unknownCommand(name, path, cmds)
				}
				cmd, cmds, path = found, found.Subcommands, path+" "+found.Name
			}
			switch {
			case cmd == nil && group == nil:
				return cli.ShowAppHelp(c.Lineage()[1])
			case cmd == nil:
				cmd = group
			}
			if cmd.HelpName == "" {
				cmd.HelpName = path
			}
			tmpl := cmd.CustomHelpTemplate
			if tmpl == "" {
				tmpl = cli.CommandHelpTemplate
			}
			cli.HelpPrinter(c.App.Writer, tmpl, cmd)
			return nil
		},
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
			return nil, usageError{withFlagSuggestion(fmt.Errorf("%s: flag provided but not defined: %s", c.Command.Name, a), c.Command.Flags)}
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
