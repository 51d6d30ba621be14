package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/internal/keytext"
	"github.com/lockscope/lockscope/internal/redisson"
	"github.com/lockscope/lockscope/lock"
)

func locksCommand() *command {
	return &command{
		name:  "locks",
		args:  "[PATTERN]",
		short: "list current lock holders whose keys match a pattern",
		long: `Locks scans Redis (SCAN, never KEYS) for the string and hash keys (Redisson's locks
are hashes) matching PATTERN, a Redis
glob (default "*"), and shows each lock's holder: owner, how long it has been
held, the TTL left, the fencing token and the fingerprint that 'release
--fingerprint' takes. Locks taken by other libraries are listed as foreign,
named by their library and value fingerprint (their value is that library's
secret token: 'inspect --reveal' prints it), when they have a TTL or their
value is a known library's token (redis-py, node-redlock, redsync,
redislock): such a lock without a TTL never expires (a redis-py Lock without
timeout, the most dangerous kind) and is marked NO EXPIRY. Any other value
without a TTL is a plain value or a lock that never expires: --no-ttl lists
those too, marked NO EXPIRY; otherwise their count is printed. lockscope's own keys (fence
counters, the stream's checkpoint and replica records) are skipped.`,
		define: func(f *flagSet) func(context.Context, *Env, []string) error {
			f.maxArgs = 1
			var rc redisConfig
			rc.defineConn(f)
			rc.defineStream(f, "Redis stream the lock library writes its events to (read for the callers waiting now)")
			var asJSON, noTTL bool
			var limit int
			f.Bool(&asJSON, "json", "LOCKSCOPE_JSON", false, "print JSON (one array) instead of a table")
			f.Bool(&noTTL, "no-ttl", "LOCKSCOPE_LOCKS_NO_TTL", false, "also list keys without a TTL whose value is no known library's token, as locks that never expire")
			f.Int(&limit, "limit", "LOCKSCOPE_LOCKS_LIMIT", 1000, "show at most this many locks (0: no limit)")
			return func(ctx context.Context, env *Env, args []string) error {
				pattern := "*"
				if len(args) == 1 {
					pattern = args[0]
				}
				rdb, err := rc.connect(ctx)
				if err != nil {
					return err
				}
				defer rdb.Close()
				found, err := listLocks(ctx, rdb, pattern, limit, rc.stream, noTTL, "")
				if err != nil {
					return err
				}
				holders, truncated := found.holders, found.truncated
				if found.noTTL > 0 {
					fmt.Fprintf(env.Stderr, "%d matching keys have no TTL and hold no known library's token: not listed, as plain values (or locks that never expire: --no-ttl lists them)\n", found.noTTL)
				}
				now := time.Now()
				waiting, werr := liveWaiters(ctx, rdb, rc.stream, rc.partitions, now)
				if werr != nil {
					fmt.Fprintf(env.Stderr, "waiters unknown: cannot read the event stream %s: %v\n", rc.stream, werr)
				}
				if asJSON {
					out := make([]holderJSON, 0, len(holders))
					for _, h := range holders {
						j := toJSON(h, now)
						if werr == nil {
							n := waiting[h.Key]
							j.Waiters = &n
						}
						out = append(out, j)
					}
					enc := json.NewEncoder(env.Stdout)
					enc.SetIndent("", "  ")
					return enc.Encode(out)
				}
				if len(holders) == 0 {
					fmt.Fprintf(env.Stdout, "no locks match %s\n", keytext.Terminal(pattern, 0))
					return nil
				}
				tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "KEY\tOWNER\tHELD\tTTL\tWAITING\tFENCE\tFINGERPRINT")
				never := 0
				for _, h := range holders {
					owner := keytext.Terminal(h.Owner, 60)
					if h.Foreign {
						owner = "(foreign) " + owner
					}
					fence := "-"
					if h.Fence > 0 {
						fence = strconv.FormatInt(h.Fence, 10)
					}
					if h.TTL < 0 {
						never++
					}
					wait := "?"
					if werr == nil {
						wait = strconv.Itoa(waiting[h.Key])
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", keytext.Terminal(h.Key, 80), owner,
						formatHeld(h, now), formatTTL(h.TTL), wait, fence, h.Fingerprint[:12])
				}
				tw.Flush()
				if never > 0 {
					fmt.Fprintf(env.Stderr, "warning: %d listed locks never expire (TTL NO EXPIRY): if their holder dies they stay held until released by hand\n", never)
				}
				if truncated {
					fmt.Fprintf(env.Stderr, "(more than %d locks match; showing the first %d: narrow the pattern or raise --limit)\n", limit, limit)
				}
				return nil
			}
		},
	}
}

// lockList is what listLocks found.
type lockList struct {
	holders   []*lock.Holder
	truncated bool // limit reached
	noTTL     int  // foreign keys without a TTL left out
}

// listLocks finds the lock holders among the string keys matching pattern,
// sorted by key, leaving out lockscope's own keys (fence counters, and the
// string keys under stream: checkpoint, replica records). Foreign keys without
// a TTL are listed when their value is a known library's token or noTTL,
// else counted. With owner set, only the locks whose holder Redis names
// owner are listed (and limit counts those). Inspections run a few at a
// time: each is one script call.
func listLocks(ctx context.Context, rdb redis.UniversalClient, pattern string, limit int, stream string, noTTL bool, owner string) (lockList, error) {
	lc := redisson.NewAnyLockClient(lock.New(rdb, nil), rdb, nil)
	var (
		mu        sync.Mutex
		holders   []*lock.Holder
		firstErr  error
		skipped   int
		wg        sync.WaitGroup
		sem       = make(chan struct{}, 8)
		truncated bool
	)
	scanErr := scanLocks(ctx, rdb, pattern, func(key string) bool {
		if strings.HasPrefix(key, lock.FencePrefix) || key == stream || strings.HasPrefix(key, stream+":") {
			return true
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			h, err := lc.Inspect(ctx, key)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.Is(err, lock.ErrNotHeld):
			case err == nil && owner != "" && h.Owner != owner:
			case err != nil:
				if firstErr == nil {
					firstErr = fmt.Errorf("inspect %s: %w", keytext.Terminal(key, 80), err)
				}
			case h.Foreign && h.TTL < 0 && !noTTL && lock.ForeignKind(h.Value) == "":
				// No TTL and no known library's token: a plain value,
				// unless the user says such keys are locks.
				skipped++
			default:
				holders = append(holders, h)
			}
		})
		mu.Lock()
		defer mu.Unlock()
		if limit > 0 && len(holders) >= limit {
			truncated = true
			return false
		}
		return true
	})
	wg.Wait()
	if scanErr != nil {
		return lockList{}, fmt.Errorf("scan: %w", scanErr)
	}
	if firstErr != nil {
		return lockList{}, firstErr
	}
	slices.SortFunc(holders, func(a, b *lock.Holder) int { return strings.Compare(a.Key, b.Key) })
	if limit > 0 && len(holders) > limit {
		holders, truncated = holders[:limit], true
	}
	return lockList{holders: holders, truncated: truncated, noTTL: skipped}, nil
}
