package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
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
		args:  "KEY --reason REASON | --owner NAME [PATTERN] --reason REASON",
		short: "force-release a lock, or every lock of one owner, only if still held by the holder you saw",
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
any release failed or NAME holds nothing.`,
		define: func(f *flagSet) func(context.Context, *Env, []string) error {
			f.minArgs, f.maxArgs = 0, 1
			var rc redisConfig
			rc.defineConn(f)
			rc.defineStream(f, "Redis stream the forced-release event is written to")
			var reason, fingerprint, by, owner string
			var yes, anyHolder bool
			f.String(&reason, "reason", "", "", "why the lock is released (required; recorded with the event)")
			f.String(&owner, "owner", "", "", "release every lock this owner holds (instead of KEY)")
			f.Bool(&anyHolder, "any-holder", "LOCKSCOPE_RELEASE_ANY_HOLDER", false, "for a constant value without expiry (which cannot tell its holder from a successor): release whoever holds it")
			f.String(&fingerprint, "fingerprint", "", "", "release only if the holder's fingerprint is this one")
			f.String(&by, "operator-user", "LOCKSCOPE_OPERATOR_USER", "", "who releases, recorded with the event (default $USER)")
			f.Bool(&yes, "yes", "LOCKSCOPE_ASSUME_YES", false, "do not ask for confirmation")
			return func(ctx context.Context, env *Env, args []string) error {
				switch {
				case owner != "" && fingerprint != "":
					return usageErrorf(f.cmd, "--fingerprint names one holder: it does not go with --owner")
				case owner == "" && len(args) == 0:
					return usageErrorf(f.cmd, "missing argument: usage: lockscope %s %s", f.cmd.name, f.cmd.args)
				}
				if strings.TrimSpace(reason) == "" {
					return usageErrorf(f.cmd, "--reason is required: say why the lock is force-released")
				}
				if by == "" {
					by, _ = env.LookupEnv("USER")
					if by == "" {
						by = "cli"
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
				return release(ctx, env, rdb, rc.stream, rc.partitions, args[0], fingerprint, by, reason, yes, anyHolder)
			}
		},
	}
}

func release(ctx context.Context, env *Env, rdb redis.UniversalClient, stream string, partitions int, key, fingerprint, by, reason string, yes, anyHolder bool) error {
	em := lock.NewEmitter(rdb, &lock.EmitterOptions{Stream: stream, Partitions: partitions})
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		em.Close(cctx)
	}()
	lc := redisson.NewReleaser(lock.New(rdb, &lock.Options{Recorder: em}), rdb, em)
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
