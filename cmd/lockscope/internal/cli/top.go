package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/charmbracelet/x/term"
	"github.com/muesli/termenv"

	"github.com/lockscope/lockscope/cmd/lockscope/internal/top"
	"github.com/lockscope/lockscope/cmd/lockscope/internal/top/api"
)

func topCommand() *command {
	return &command{
		name:  "top",
		args:  "--url URL",
		short: "the live picture in a terminal, from a running serve's API",
		long: `Top shows what the dashboard shows, live, full-screen in a terminal (an SSH
session, kubectl exec, a bastion without a browser): the overview's figures
and whether the collector is ingesting, then tabs for the held locks
(sortable by attention, held for, waiters), who blocks whom (holders with
their waiters, chains, deadlock cycles), hot keys, recent expirations and
incidents. Enter opens a key: its holder, since, TTL, the callers waiting
for it with their deadlines, its recent events. It reads a running serve's
JSON API (any replica), with the same viewer and operator rules as the
dashboard.

With operator credentials (the serve's: a bearer token, or a user and
password) 'a' asks the holder to release and 'f' force-releases: each shows
the holder Redis has now with its fingerprint and asks for a reason, and
goes through only while that holder still holds the lock.

Keys: arrows or j/k select, tab or 1-5 switch panes, s sorts the held locks,
p pauses, r refreshes now, esc goes back, q quits. No colour when NO_COLOR
is set or the terminal has none.`,
		define: func(f *flagSet) func(context.Context, *Env, []string) error {
			f.maxArgs = 0
			var base, user, password, token string
			var interval, timeout time.Duration
			f.String(&base, "url", "LOCKSCOPE_URL", "", "address of a running lockscope serve (http://host:8080)")
			f.meta["url"] = "URL"
			f.Duration(&interval, "interval", "LOCKSCOPE_TOP_INTERVAL", 2*time.Second, "how often the view refreshes")
			f.Duration(&timeout, "timeout", "LOCKSCOPE_TOP_TIMEOUT", 5*time.Second, "how long one refresh or action may take")
			f.String(&user, "operator-user", "LOCKSCOPE_OPERATOR_USER", "", "operator user name (HTTP basic auth), for asking and force release")
			f.Secret(&password, "operator-password", "LOCKSCOPE_OPERATOR_PASSWORD", "operator password (prefer the environment variable: flags show in ps)")
			f.Secret(&token, "operator-token", "LOCKSCOPE_OPERATOR_TOKEN", "operator bearer token (prefer the environment variable); wins over user and password")
			return func(ctx context.Context, env *Env, _ []string) error {
				switch {
				case base == "":
					return usageErrorf(f.cmd, "--url is required: the address of a running lockscope serve")
				case interval < 200*time.Millisecond:
					return usageErrorf(f.cmd, "--interval must be at least 200ms")
				case timeout <= 0:
					return usageErrorf(f.cmd, "--timeout must be positive")
				case token == "" && (user == "") != (password == ""):
					return usageErrorf(f.cmd, "--operator-user and --operator-password go together (or give --operator-token)")
				}
				if token != "" {
					user, password = "", ""
				}
				c, err := api.New(base, api.Credentials{Token: token, User: user, Password: password}, nil)
				if err != nil {
					return usageErrorf(f.cmd, "%v", err)
				}
				in, inOK := env.Stdin.(*os.File)
				out, outOK := env.Stdout.(*os.File)
				if !inOK || !outOK || !term.IsTerminal(in.Fd()) || !term.IsTerminal(out.Fd()) {
					return errors.New("not a terminal: top draws a full-screen view (for scripts: 'lockscope locks --json' or the serve's JSON API)")
				}
				opt := top.Options{URL: c.Base(), Interval: interval, Timeout: timeout, Operator: c.Operator(), Profile: colorProfile(env, out)}
				if err := top.Run(ctx, c, opt, in, out); err != nil {
					return fmt.Errorf("terminal: %w", err)
				}
				return nil
			}
		},
	}
}

// colorProfile is how the terminal on out takes colours: none when
// NO_COLOR is set (https://no-color.org) or TERM says the terminal has
// none, whatever a CI variable says.
func colorProfile(env *Env, out *os.File) termenv.Profile {
	if v, ok := env.LookupEnv("NO_COLOR"); ok && v != "" {
		return termenv.Ascii
	}
	if t, _ := env.LookupEnv("TERM"); t == "" || t == "dumb" {
		return termenv.Ascii
	}
	if !term.IsTerminal(out.Fd()) {
		return termenv.Ascii
	}
	// termenv takes a set CI variable to mean "not a terminal"; top runs
	// only in one, and there TERM and COLORTERM say what it shows.
	return termenv.NewOutput(out, termenv.WithTTY(true)).ColorProfile()
}
