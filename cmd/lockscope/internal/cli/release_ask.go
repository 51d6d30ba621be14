package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/dashboard"
	"github.com/lockscope/lockscope/internal/keytext"
	"github.com/lockscope/lockscope/internal/redisson"
	"github.com/lockscope/lockscope/lock"
)

// release KEY --ask: ask before force. The holder the command shows is
// asked to release (it hears the request at once if it listens:
// lock.Lease.ReleaseRequested, Python's Lock.listen); the command then
// waits, up to the grace, for Redis to stop holding that holder's value,
// and only then, with --then-force, force-releases it with the
// fingerprint it showed at the start: a holder that took the key in
// between is never touched. A holder that cannot hear (another library's
// lock, a lockscope holder that does not listen) is said to be so at once,
// without waiting.

// The dashboard offers asking through the same redisson.AnyLockClient.
var _ dashboard.Asker = (*redisson.AnyLockClient)(nil)

// DefaultGrace is how long release --ask waits for the holder by default.
const DefaultGrace = 30 * time.Second

// askPoll is how often release --ask reads the key while it waits: a
// condition on Redis, each read one GET-sized script.
const askPoll = 100 * time.Millisecond

func releaseAsk(ctx context.Context, env *Env, rdb redis.UniversalClient, stream string, partitions int, key, fingerprint, by, reason string, grace time.Duration, thenForce, yes, anyHolder bool) error {
	lc, em := operatorClient(rdb, stream, partitions)
	defer closeEmitter(em, 5*time.Second) // flushes the events of what it did
	h, err := lc.Inspect(ctx, key)
	if errors.Is(err, lock.ErrNotHeld) {
		return fmt.Errorf("%s is not held; nobody to ask", keytext.Terminal(key, 200))
	}
	if err != nil {
		return err
	}
	printHolder(env.Stdout, h, time.Now())
	if fingerprint == "" {
		fingerprint = h.Fingerprint
	} else if strings.TrimSuffix(fingerprint, "@any") != h.Fingerprint {
		return ownerChanged(key, h)
	}
	k := keytext.Terminal(key, 200)
	if thenForce && !yes {
		q := fmt.Sprintf("Ask the holder of %s to release it, and force-release it if it has not within %s?", k, grace)
		if err := confirmed(env, q); err != nil {
			return err
		}
	}
	force := func(why string) error {
		fmt.Fprintf(env.Stdout, "%s; force-releasing the holder shown above (--then-force)\n", why)
		return release(ctx, env, rdb, stream, partitions, key, fingerprint, by, reason, true, anyHolder)
	}
	asked, n, err := lc.RequestRelease(ctx, key, fingerprint, lock.ReleaseRequest{Operator: by, Reason: reason, Grace: grace})
	cannot := ""
	switch {
	case errors.Is(err, lock.ErrOwnerChanged):
		return ownerChanged(key, asked)
	case errors.Is(err, lock.ErrNotHeld):
		return &Error{Code: ExitOwnerChanged, Err: fmt.Errorf("owner changed: %s is no longer held; nobody was asked", k)}
	case errors.Is(err, lock.ErrCannotHear):
		cannot = "the holder cannot be asked: " + strings.TrimPrefix(err.Error(), lock.ErrCannotHear.Error()+": ") + ", which cannot hear a release request; nothing was sent"
	case err != nil:
		return err
	case n == 0:
		cannot = "the holder cannot be asked: it does not listen for release requests (a lockscope library older than them, or code that never calls ReleaseRequested or listen); the request is on the record, but nobody heard it"
	}
	if cannot != "" {
		if thenForce {
			return force(cannot)
		}
		return &Error{Code: ExitNotReleased, Err: fmt.Errorf("%s: %s; to force-release it: lockscope release %s --reason REASON", k, cannot, shellQuote(key))}
	}
	fmt.Fprintf(env.Stdout, "asked %s to release %s (heard by %d %s), by %s: %s; waiting up to %s\n",
		keytext.Terminal(asked.Owner, 100), k, n, plural(int(n), "listener", "listeners"), by, reason, grace)
	start := time.Now()
	now, err := waitReleased(ctx, lc, key, fingerprint, grace)
	switch {
	case err != nil:
		return err
	case now == nil:
		fmt.Fprintf(env.Stdout, "released by its holder after %s\n", time.Since(start).Round(time.Millisecond))
		return nil
	case now.Fingerprint != fingerprint:
		fmt.Fprintf(env.Stdout, "released by its holder after %s; now held by %s\n", time.Since(start).Round(time.Millisecond), keytext.Terminal(now.Owner, 100))
		return nil
	}
	why := fmt.Sprintf("no answer in %s: %s still holds %s", grace, keytext.Terminal(now.Owner, 100), k)
	if thenForce {
		return force(why)
	}
	return &Error{Code: ExitNotReleased, Err: fmt.Errorf("%s; add --then-force to force-release it after the grace", why)}
}

// waitReleased reads key every askPoll until it no longer holds the value
// of fingerprint or grace has passed: nil when it is free, else its holder
// then (the same one when grace passed).
func waitReleased(ctx context.Context, lc *redisson.AnyLockClient, key, fingerprint string, grace time.Duration) (*lock.Holder, error) {
	wctx, cancel := context.WithTimeout(ctx, grace)
	defer cancel()
	t := time.NewTicker(askPoll)
	defer t.Stop()
	for {
		rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
		h, err := lc.Inspect(rctx, key)
		rcancel()
		switch {
		case errors.Is(err, lock.ErrNotHeld):
			return nil, nil
		case err != nil:
			return nil, err
		case h.Fingerprint != fingerprint:
			return h, nil
		}
		select {
		case <-wctx.Done():
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return h, nil
		case <-t.C:
		}
	}
}

// shellQuote quotes s for a command line a user may paste.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r == '-' || r == '_' || r == ':' || r == '.' || r == '/' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
