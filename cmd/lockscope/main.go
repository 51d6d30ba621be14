// Command lockscope makes Redis distributed locks visible and controllable:
// a zero-setup demo, the collector with its dashboard and /metrics, a
// workload generator, and operator commands to list, inspect and
// force-release locks. Run 'lockscope help' for the commands and flags.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/lockscope/lockscope/cmd/lockscope/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// After the first signal starts a graceful shutdown, a second one kills
	// the process the default way.
	go func() { <-ctx.Done(); stop() }()
	err := run(ctx, os.Args[1:], os.LookupEnv, os.Stdin, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(cli.ExitCode(err))
}

func run(ctx context.Context, args []string, lookupEnv func(string) (string, bool), stdin io.Reader, stdout, stderr io.Writer) error {
	return cli.Run(ctx, args, cli.Env{Stdin: stdin, Stdout: stdout, Stderr: stderr, LookupEnv: lookupEnv})
}
