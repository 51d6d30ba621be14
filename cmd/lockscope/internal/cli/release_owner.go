package cli

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/internal/keytext"
	"github.com/lockscope/lockscope/internal/redisson"
	"github.com/lockscope/lockscope/lock"
)

// release --owner: every lock one owner holds, each released only if its
// value is still the one listed.
//
// The source of truth is Redis, not a running serve: the command must work
// when the dashboard is down (the night a pod died is such a night), and
// Redis is what each release is checked against anyway. A lock's holder is
// named as 'lockscope locks' names it: lockscope's values carry their
// owner, Redisson's hashes their client, another library's token is
// "redsync 3f2a9c1b". The dashboard's owner page lists the owners the
// collector names instead (which may be what an instrumented foreign
// client reported), then checks each against Redis the same way.

// ownerOutcome is what became of one listed lock.
type ownerOutcome int

const (
	outReleased  ownerOutcome = iota
	outChanged                // another holder (or the same value renewed under a new expiry): left alone
	outFree                   // released or expired before we got to it
	outAmbiguous              // a constant value without expiry: cannot be told from a successor
	outError
)

// releaseOwner lists owner's locks, confirms, releases them one by one and
// reports each.
func releaseOwner(ctx context.Context, env *Env, rdb redis.UniversalClient, stream string, partitions int, owner, pattern, by, reason string, yes, anyHolder bool) error {
	found, err := listLocks(ctx, rdb, pattern, 0, stream, true, owner)
	if err != nil {
		return err
	}
	who := keytext.Terminal(owner, 100)
	matching := ""
	if pattern != "*" {
		matching = " matching " + keytext.Terminal(pattern, 0)
	}
	if len(found.holders) == 0 {
		return fmt.Errorf("%s holds no locks%s; nothing to release", who, matching)
	}
	now := time.Now()
	fmt.Fprintf(env.Stdout, "%s holds %d %s%s:\n", who, len(found.holders), plural(len(found.holders), "lock", "locks"), matching)
	tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tHELD\tTTL\tFENCE\tFINGERPRINT")
	for _, h := range found.holders {
		fence := "-"
		if h.Fence > 0 {
			fence = strconv.FormatInt(h.Fence, 10)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", keytext.Terminal(h.Key, 80), formatHeld(h, now), formatTTL(h.TTL), fence, h.Fingerprint[:12])
	}
	tw.Flush()
	if !yes {
		q := fmt.Sprintf("Force-release these %d %s of %s? Each is released only if its holder is still the one listed; each holder loses its lock at its next renewal.",
			len(found.holders), plural(len(found.holders), "lock", "locks"), who)
		if err := confirmed(env, q); err != nil {
			return err
		}
	}

	lc, em := operatorClient(rdb, stream, partitions)
	defer closeEmitter(em, 5*time.Second) // flushes the events of what it did
	var counts [outError + 1]int
	for _, h := range found.holders {
		out, line := releaseListed(ctx, lc, h, by, reason, anyHolder)
		counts[out]++
		fmt.Fprintln(env.Stdout, line)
	}
	if counts[outReleased] > 0 {
		if err := em.Flush(ctx); err != nil {
			fmt.Fprintf(env.Stderr, "warning: the releases happened but their events could not be written to %s: %v\n", stream, err)
		}
	}
	summary := fmt.Sprintf("%d released, %d skipped (holder changed), %d skipped (already free)",
		counts[outReleased], counts[outChanged], counts[outFree])
	if counts[outAmbiguous] > 0 {
		summary += fmt.Sprintf(", %d skipped (constant value without expiry)", counts[outAmbiguous])
	}
	if counts[outError] > 0 {
		summary += fmt.Sprintf(", %d %s", counts[outError], plural(counts[outError], "error", "errors"))
	}
	fmt.Fprintf(env.Stdout, "%s; recorded as forced by %s: %s\n", summary, by, reason)
	switch {
	case counts[outError] > 0:
		return fmt.Errorf("%d of %d releases failed: %s", counts[outError], len(found.holders), summary)
	case counts[outChanged]+counts[outAmbiguous] > 0:
		return &Error{Code: ExitOwnerChanged, Err: fmt.Errorf("owner changed: %d of %d locks could not be told to be still the listed holder's and were left alone", counts[outChanged]+counts[outAmbiguous], len(found.holders))}
	}
	return nil
}

// releaseListed force-releases h.Key if its value still has h's
// fingerprint, and says what happened in one line.
func releaseListed(ctx context.Context, lc *redisson.AnyLockClient, h *lock.Holder, by, reason string, anyHolder bool) (ownerOutcome, string) {
	key := keytext.Terminal(h.Key, 200)
	fp := h.Fingerprint
	if h.NeedsAnyHolder() {
		if !anyHolder {
			return outAmbiguous, "skipped: " + key + ": a constant value without expiry cannot be told from a successor's (release it by key with --any-holder)"
		}
		fp += "@any"
	}
	cur, err := lc.ForceRelease(ctx, h.Key, fp, by, reason)
	switch {
	case err == nil:
		return outReleased, "released: " + key
	case errors.Is(err, lock.ErrOwnerChanged):
		now := "someone else"
		if cur != nil {
			now = keytext.Terminal(cur.Owner, 100)
		}
		return outChanged, "skipped: " + key + ": holder changed (now " + now + ")"
	case errors.Is(err, lock.ErrAmbiguous):
		return outAmbiguous, "skipped: " + key + ": a constant value without expiry cannot be told from a successor's (release it by key with --any-holder)"
	case errors.Is(err, lock.ErrNotHeld):
		return outFree, "skipped: " + key + ": already free"
	default:
		return outError, "error: " + key + ": " + strings.Join(strings.Fields(err.Error()), " ")
	}
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
