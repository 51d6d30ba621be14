package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os/user"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/internal/keytext"
	"github.com/lockscope/lockscope/internal/redisson"
	"github.com/lockscope/lockscope/lock"
)

func releaseCommand() *command {
	return &command{
		name:  "release",
		args:  "KEY --reason REASON [--ask [--grace D] [--then-force]] | --owner NAME [PATTERN] --reason REASON",
		short: "ask a holder to release, or force-release a lock or every lock of one owner, only if still held by the holder you saw",
		long: `Release force-releases a stuck lock: release what you saw. It shows the current
holder and the fingerprint of its value, asks for confirmation on stdin (unless
--yes), then deletes the key in one Lua script only if its value still has that
fingerprint. With --fingerprint (from 'lockscope inspect' or the dashboard) it
releases only that exact holder. If the lock changed hands meanwhile nothing
is touched and the exit status is 3 ("owner changed"). Another library's
constant value ("1") cannot tell its holder from a successor: its expiry,
part of the fingerprint, does; without an expiry the release is refused
unless --any-holder. The release is written
to the event stream (who, when, reason) so the collector counts it; the holder
sees the loss at its next renewal.

With --owner NAME instead of KEY it releases every lock NAME holds (a pod
that died holding 40 locks) among the keys matching PATTERN, a Redis glob
(default "*"; an operator user limited to a prefix gives the prefix): it
scans Redis as 'lockscope locks' does and lists each lock whose value
names NAME as its holder (lockscope's values name
their owner; another library's token is named as 'lockscope locks' shows it,
"redsync 3f2a9c1b"), asks once for all of them, then releases each only if
its value is still the one listed, and prints one line per key: released,
skipped: holder changed, skipped: already free, or error, then a summary.
Exit status: 0 when every listed lock was released or was already free, 3
when none failed but some changed hands (left to their new holder), 1 when
any release failed or NAME holds nothing.

With --ask it asks first: the holder shown is sent a release request with
the reason (it hears it at once if it listens: the Go library's
Lease.ReleaseRequested, the Python Lock.listen), written to the event
stream as a requested event; then the command waits, up to --grace
(default 30s), for Redis to stop holding that holder's value: exit 0 when
the holder released. With --then-force (confirmed on stdin unless --yes)
it then force-releases the holder shown at the start, with the fingerprint
it showed, never a newer one. A holder that cannot be asked (another
library's lock, a lockscope holder that does not listen) is said to be so
at once, without waiting (forced at once with --then-force). Exit status 4
when the holder cannot be asked or did not release within the grace and
--then-force was not given; 3 when the key changed hands.`,
		define: func(f *flagSet) func(context.Context, *Env, []string) error {
			f.minArgs, f.maxArgs = 0, 1
			var rc redisConfig
			rc.defineConn(f)
			rc.defineStream(f, "Redis stream the forced-release event is written to")
			var reason, fingerprint, by, owner string
			var yes, anyHolder bool
			var ask, thenForce bool
			grace := DefaultGrace
			f.Bool(&ask, "ask", "", false, "ask the holder to release instead of forcing (see --grace, --then-force)")
			f.Duration(&grace, "grace", "LOCKSCOPE_RELEASE_GRACE", DefaultGrace, "with --ask: how long to wait for the holder to release")
			f.Bool(&thenForce, "then-force", "", false, "with --ask: force-release the holder shown if it has not released within the grace")
			f.String(&reason, "reason", "", "", "why the lock is released (required; recorded with the event)")
			f.String(&owner, "owner", "", "", "release every lock this owner holds (instead of KEY)")
			f.Bool(&anyHolder, "any-holder", "LOCKSCOPE_RELEASE_ANY_HOLDER", false, "for a constant value without expiry (which cannot tell its holder from a successor): release whoever holds it")
			f.String(&fingerprint, "fingerprint", "", "", "release only if the holder's fingerprint is this one")
			f.String(&by, "operator-user", "LOCKSCOPE_OPERATOR_USER", "", "who releases, recorded with the event (default $USER, else $LOGNAME, else the account name)")
			f.Bool(&yes, "yes", "LOCKSCOPE_ASSUME_YES", false, "do not ask for confirmation")
			return func(ctx context.Context, env *Env, args []string) error {
				switch {
				case owner != "" && fingerprint != "":
					return usageErrorf(f.cmd, "--fingerprint names one holder: it does not go with --owner")
				case owner == "" && len(args) == 0:
					return usageErrorf(f.cmd, "missing argument: usage: lockscope %s %s", f.cmd.name, f.cmd.args)
				}
				switch {
				case ask && owner != "":
					return usageErrorf(f.cmd, "--ask names one holder: it does not go with --owner")
				case !ask && thenForce:
					return usageErrorf(f.cmd, "--then-force goes with --ask")
				case grace <= 0:
					return usageErrorf(f.cmd, "--grace must be positive")
				}
				if strings.TrimSpace(reason) == "" {
					return usageErrorf(f.cmd, "--reason is required: say why the lock is force-released")
				}
				if by == "" {
					if by = operatorName(env); by == "" {
						return usageErrorf(f.cmd, "say who releases: --operator-user (LOCKSCOPE_OPERATOR_USER); neither $USER nor $LOGNAME is set and this process's user has no name")
					}
				}
				rdb, err := rc.connect(ctx)
				if err != nil {
					return err
				}
				defer rdb.Close()
				if owner != "" {
					pattern := "*"
					if len(args) == 1 {
						pattern = args[0]
					}
					return releaseOwner(ctx, env, rdb, rc.stream, rc.partitions, owner, pattern, by, reason, yes, anyHolder)
				}
				if ask {
					return releaseAsk(ctx, env, rdb, rc.stream, rc.partitions, args[0], fingerprint, by, reason, grace, thenForce, yes, anyHolder)
				}
				return release(ctx, env, rdb, rc.stream, rc.partitions, args[0], fingerprint, by, reason, yes, anyHolder)
			}
		},
	}
}

func release(ctx context.Context, env *Env, rdb redis.UniversalClient, stream string, partitions int, key, fingerprint, by, reason string, yes, anyHolder bool) error {
	lc, em := operatorClient(rdb, stream, partitions)
	defer closeEmitter(em, 5*time.Second) // flushes the events of what it did
	h, err := lc.Inspect(ctx, key)
	if errors.Is(err, lock.ErrNotHeld) {
		return fmt.Errorf("%s is not held; nothing to release", keytext.Terminal(key, 200))
	}
	if err != nil {
		return err
	}
	now := time.Now()
	printHolder(env.Stdout, h, now)
	if fingerprint == "" {
		fingerprint = h.Fingerprint
	} else if strings.TrimSuffix(fingerprint, "@any") != h.Fingerprint {
		return ownerChanged(key, h)
	}
	if h.Ambiguous && !strings.Contains(fingerprint, "@") {
		// A constant value and no expiry: nothing tells this holder from a
		// successor that wrote the same value.
		if !anyHolder {
			return &Error{Code: ExitOwnerChanged, Err: fmt.Errorf("%s holds a constant value without expiry: a successor would look the same, so nothing was released; --any-holder releases whoever holds it when you confirm", keytext.Terminal(key, 200))}
		}
		fmt.Fprintln(env.Stdout, "warning: this holder cannot be told from a successor with the same value: whoever holds it when you confirm is released")
		fingerprint += "@any"
	}
	if !yes {
		prompt := fmt.Sprintf("Force-release %s? Its holder loses the lock at its next renewal.", keytext.Terminal(key, 200))
		if err := confirmed(env, prompt); err != nil {
			return err
		}
	}
	released, err := lc.ForceRelease(ctx, key, fingerprint, by, reason)
	switch {
	case errors.Is(err, lock.ErrOwnerChanged):
		return ownerChanged(key, released)
	case errors.Is(err, lock.ErrAmbiguous):
		return &Error{Code: ExitOwnerChanged, Err: fmt.Errorf("%s holds a constant value without expiry: a successor would look the same, so nothing was released; --any-holder releases whoever holds it", keytext.Terminal(key, 200))}
	case errors.Is(err, lock.ErrNotHeld):
		return &Error{Code: ExitOwnerChanged, Err: fmt.Errorf("owner changed: %s is no longer held; nothing was released", keytext.Terminal(key, 200))}
	case err != nil:
		return err
	}
	if err := em.Flush(ctx); err != nil {
		fmt.Fprintf(env.Stderr, "warning: the release happened but its event could not be written to %s: %v\n", stream, err)
	}
	fmt.Fprintf(env.Stdout, "released %s (held by %s for %s), recorded as forced by %s: %s\n",
		keytext.Terminal(key, 200), keytext.Terminal(released.Owner, 100), formatHeld(released, now), by, reason)
	return nil
}

// confirmed asks the question on stdout and reads the answer from stdin:
// nil for "yes", else why nothing happens. A stdin that ends without an
// answer (a pipe, /dev/null, a CI job) is a refusal: a release needs a
// "yes" typed or piped on purpose, or --yes.
// operatorClient is the client every operator release and request goes
// through: it inspects and releases locks of every kind
// (redisson.AnyLockClient) and records each forced release and request on
// the event stream through em, as the dashboard's are.
func operatorClient(rdb redis.UniversalClient, stream string, partitions int) (lc *redisson.AnyLockClient, em *lock.Emitter) {
	em = lock.NewEmitter(rdb, &lock.EmitterOptions{Stream: stream, Partitions: partitions})
	return redisson.NewAnyLockClient(lock.New(rdb, &lock.Options{Recorder: em}), rdb, em), em
}

func confirmed(env *Env, question string) error {
	fmt.Fprintf(env.Stdout, "%s Type 'yes' to confirm: ", question)
	line, err := bufio.NewReader(env.Stdin).ReadString('\n')
	answer := strings.ToLower(strings.TrimSpace(line))
	if err != nil && answer == "" {
		fmt.Fprintln(env.Stdout)
		return errors.New("not confirmed: no answer on stdin (use --yes to skip the confirmation)")
	}
	if answer != "yes" {
		return errors.New("not confirmed; nothing was released")
	}
	return nil
}

func ownerChanged(key string, now *lock.Holder) error {
	who := "someone else"
	if now != nil {
		who = keytext.Terminal(now.Owner, 100) + " (fingerprint " + now.Fingerprint[:12] + ")"
	}
	return &Error{Code: ExitOwnerChanged, Err: fmt.Errorf("owner changed: %s is now held by %s; nothing was released", keytext.Terminal(key, 200), who)}
}

// operatorName is who runs the command, for the audit of a release without
// --operator-user: $USER, else $LOGNAME, else the name of the process's
// user account (a container's shell often sets neither variable), else "".
func operatorName(env *Env) string {
	for _, v := range []string{"USER", "LOGNAME"} {
		if name, _ := env.LookupEnv(v); strings.TrimSpace(name) != "" {
			return strings.TrimSpace(name)
		}
	}
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return ""
}
