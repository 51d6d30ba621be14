// Package cli implements the lockscope command: demo, serve, load, the
// operator commands locks, inspect and release, and advise. Every flag has a LOCKSCOPE_*
// environment variable; errors come back as one line and an exit code.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"strings"
)

// Exit codes.
const (
	ExitOK           = 0
	ExitFailure      = 1 // runtime failure: Redis unreachable, key not held, ...
	ExitUsage        = 2 // bad flags, arguments or environment values
	ExitOwnerChanged = 3 // release: the lock is no longer held by the holder that was shown
	ExitNotReleased  = 4 // release --ask: the holder cannot be asked, or did not release within the grace (without --then-force)
)

// Env is what a command reads and writes besides the network: the standard
// streams and the environment. main passes the process's own; tests pass
// their own.
type Env struct {
	Stdin     io.Reader
	Stdout    io.Writer
	Stderr    io.Writer
	LookupEnv func(string) (string, bool)
}

// Error is a command failure: one line for the user and the exit code.
type Error struct {
	Cmd  string // the command that failed; "" for the top level
	Code int
	Err  error
}

func (e *Error) Error() string {
	prefix := "lockscope"
	if e.Cmd != "" {
		prefix += " " + e.Cmd
	}
	// One line, always: wrapped Redis and network errors may carry newlines.
	msg := strings.Join(strings.Fields(e.Err.Error()), " ")
	return prefix + ": " + msg
}

func (e *Error) Unwrap() error { return e.Err }

// ExitCode maps an error returned by Run to a process exit code.
func ExitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ExitFailure
}

// errHelp is returned by flag parsing when -h was given: usage goes to stdout
// and the exit is 0.
var errHelp = errors.New("help requested")

func usageErrorf(cmd *command, format string, args ...any) error {
	name := ""
	if cmd != nil {
		name = cmd.name
	}
	hint := "run 'lockscope help'"
	if name != "" {
		hint = "run 'lockscope " + name + " -h'"
	}
	return &Error{Cmd: name, Code: ExitUsage, Err: fmt.Errorf(format+" (%s)", append(args, hint)...)}
}

// command is one subcommand. define registers its flags on f and returns the
// function that runs it with the parsed values and positional arguments.
type command struct {
	name   string
	args   string // synopsis of the positional arguments
	short  string
	long   string
	define func(f *flagSet) func(ctx context.Context, env *Env, args []string) error
}

func commands() []*command {
	return []*command{
		demoCommand(),
		serveCommand(),
		loadCommand(),
		locksCommand(),
		inspectCommand(),
		releaseCommand(),
		topCommand(),

		adviseCommand(),
		versionCommand(),
	}
}

func findCommand(name string) *command {
	for _, c := range commands() {
		if c.name == name {
			return c
		}
	}
	return nil
}

// Run runs the command line args (without the program name). It returns nil
// when ctx is cancelled by a signal and the command shut down cleanly.
func Run(ctx context.Context, args []string, env Env) error {
	if env.LookupEnv == nil {
		env.LookupEnv = func(string) (string, bool) { return "", false }
	}
	if env.Stdin == nil {
		env.Stdin = strings.NewReader("")
	}
	quietRedis(slog.New(slog.DiscardHandler)) // commands with logging flags replace it
	if len(args) == 0 {
		return &Error{Code: ExitUsage, Err: errors.New("no command given (run 'lockscope help')")}
	}
	switch args[0] {
	case "-h", "-help", "--help":
		topUsage(env.Stdout)
		return nil
	case "help":
		if len(args) == 1 {
			topUsage(env.Stdout)
			return nil
		}
		c := findCommand(args[1])
		if c == nil {
			return usageErrorf(nil, "unknown command %q", args[1])
		}
		f := newFlagSet(c)
		c.define(f)
		f.usage(env.Stdout)
		return nil
	case "-version", "--version":
		args = []string{"version"}
	}
	c := findCommand(args[0])
	if c == nil {
		return usageErrorf(nil, "unknown command %q", args[0])
	}
	f := newFlagSet(c)
	run := c.define(f)
	pos, err := f.parse(args[1:], env.LookupEnv)
	if errors.Is(err, errHelp) {
		f.usage(env.Stdout)
		return nil
	}
	if err != nil {
		return err
	}
	if err := run(ctx, &env, pos); err != nil {
		var e *Error
		if errors.As(err, &e) {
			if e.Cmd == "" {
				e.Cmd = c.name
			}
			return e
		}
		return &Error{Cmd: c.name, Code: ExitFailure, Err: err}
	}
	return nil
}

func topUsage(w io.Writer) {
	fmt.Fprintf(w, "lockscope makes Redis distributed locks visible and controllable.\n\nUsage: lockscope <command> [flags] [arguments]\n\nCommands:\n")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-9s %s\n", c.name, c.short)
	}
	fmt.Fprintf(w, "\nEvery flag can also be set with the LOCKSCOPE_* environment variable shown by\n'lockscope help <command>'; a flag on the command line wins.\n")
}

func versionCommand() *command {
	return &command{
		name:  "version",
		short: "print the version",
		long:  "Version prints the module version and VCS revision the binary was built from.",
		define: func(f *flagSet) func(context.Context, *Env, []string) error {
			f.maxArgs = 0
			return func(_ context.Context, env *Env, _ []string) error {
				fmt.Fprintln(env.Stdout, "lockscope", version())
				return nil
			}
		},
	}
}

func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(unknown)"
	}
	v := bi.Main.Version
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			v += " " + s.Value[:12]
		}
	}
	return v
}
