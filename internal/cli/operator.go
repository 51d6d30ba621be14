package cli

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/lock"
)

// holderJSON is a lock holder as the operator commands print it with --json.
type holderJSON struct {
	Key         string     `json:"key"`
	KeyB64      string     `json:"key_b64,omitempty"` // set when key is not valid UTF-8, which JSON cannot carry
	Owner       string     `json:"owner"`
	OwnerB64    string     `json:"owner_b64,omitempty"`
	Lease       string     `json:"lease,omitempty"`
	Fence       int64      `json:"fence,omitempty"`
	Since       *time.Time `json:"since,omitempty"`
	HeldFor     float64    `json:"held_for_seconds,omitempty"`
	TTLSeconds  float64    `json:"ttl_seconds"` // -1: no expiry
	Fingerprint string     `json:"fingerprint"`
	Foreign     bool       `json:"foreign,omitempty"` // written by another library; owner is its library and value fingerprint
	Value       *string    `json:"value,omitempty"`   // a foreign lock's raw value (its secret token): inspect --reveal only
	ValueB64    string     `json:"value_b64,omitempty"`
	Waiters     *int       `json:"waiters,omitempty"` // callers waiting for it now (absent: the stream could not be read)
}

func toJSON(h *lock.Holder, now time.Time) holderJSON {
	j := holderJSON{
		Key: h.Key, Owner: h.Owner, Lease: h.Lease, Fence: h.Fence,
		TTLSeconds: h.TTL.Seconds(), Fingerprint: h.Fingerprint, Foreign: h.Foreign,
	}
	if h.TTL < 0 {
		j.TTLSeconds = -1
	}
	j.KeyB64, j.OwnerB64 = b64IfInvalid(h.Key), b64IfInvalid(h.Owner)
	if !h.Since.IsZero() {
		since := h.Since.UTC()
		j.Since = &since
		j.HeldFor = now.Sub(h.Since).Round(time.Millisecond).Seconds()
	}
	return j
}

// b64IfInvalid returns s in base64 if it is not valid UTF-8 (JSON would
// replace the invalid bytes), else "". The dashboard's API does the same.
func b64IfInvalid(s string) string {
	if utf8.ValidString(s) {
		return ""
	}
	return base64.StdEncoding.EncodeToString([]byte(s))
}

// displayKey makes a key safe for a terminal: printable keys are shown as
// they are, anything with spaces, control bytes or invalid UTF-8 is quoted.
// max > 0 cuts long keys.
func displayKey(k string, max int) string {
	plain := k != "" && utf8.ValidString(k) && !strings.ContainsFunc(k, func(r rune) bool {
		return !unicode.IsPrint(r) || unicode.IsSpace(r) || r == '"'
	})
	cut := ""
	if max > 0 && len(k) > max {
		cut = fmt.Sprintf("…(%d bytes)", len(k))
		k = strings.ToValidUTF8(k[:max], "")
	}
	if !plain {
		k = strconv.Quote(k)
	}
	return k + cut
}

func formatTTL(d time.Duration) string {
	if d < 0 {
		return "NO EXPIRY"
	}
	return d.Round(time.Millisecond).String()
}

func formatHeld(h *lock.Holder, now time.Time) string {
	if h.Since.IsZero() {
		return "-"
	}
	return now.Sub(h.Since).Round(time.Millisecond).String()
}

func locksCommand() *command {
	return &command{
		name:  "locks",
		args:  "[PATTERN]",
		short: "list current lock holders whose keys match a pattern",
		long: `Locks scans Redis (SCAN, never KEYS) for string keys matching PATTERN, a Redis
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
				found, err := listLocks(ctx, rdb, pattern, limit, rc.stream, noTTL)
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
					fmt.Fprintf(env.Stdout, "no locks match %s\n", displayKey(pattern, 0))
					return nil
				}
				tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "KEY\tOWNER\tHELD\tTTL\tWAITING\tFENCE\tFINGERPRINT")
				never := 0
				for _, h := range holders {
					owner := displayKey(h.Owner, 60)
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
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", displayKey(h.Key, 80), owner,
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
// else counted. Inspections run a few at a time:
// each is one script call.
func listLocks(ctx context.Context, rdb redis.UniversalClient, pattern string, limit int, stream string, noTTL bool) (lockList, error) {
	lc := lock.New(rdb, nil)
	var (
		mu        sync.Mutex
		holders   []*lock.Holder
		firstErr  error
		skipped   int
		wg        sync.WaitGroup
		sem       = make(chan struct{}, 8)
		truncated bool
	)
	scanErr := scanStrings(ctx, rdb, pattern, func(key string) bool {
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
			case err != nil:
				if firstErr == nil {
					firstErr = fmt.Errorf("inspect %s: %w", displayKey(key, 80), err)
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

// waitersScan bounds how many of the newest events liveWaiters reads per
// stream. A waiter whose waiting event is older than that is missed (never
// invented): at 1 000 events/s, 20 000 events cover the last 20 seconds.
const waitersScan = 20_000

// liveWaiters counts, per key, the callers waiting now among the newest
// entries of the stream (each partition), by the state's own rule
// (state.LiveWaiters).
func liveWaiters(ctx context.Context, rdb redis.UniversalClient, stream string, partitions int, now time.Time) (map[string]int, error) {
	var evs []event.Event
	for _, st := range event.Streams(stream, max(partitions, 1)) {
		end, n := "+", 0
		for n < waitersScan {
			msgs, err := rdb.XRevRangeN(ctx, st, end, "-", 64).Result()
			if err != nil {
				return nil, err
			}
			for _, m := range msgs {
				if d, err := event.Decode(m.Values); err == nil {
					evs = append(evs, d...)
					n += len(d)
				}
			}
			if len(msgs) < 64 {
				break
			}
			end = "(" + msgs[len(msgs)-1].ID
		}
	}
	return state.LiveWaiters(evs, now), nil
}

// errStopScan ends scanStrings early.
var errStopScan = errors.New("stop")

// scanStrings calls each (one call at a time) for the string keys matching
// pattern on every master (a Cluster's keys live on several) until it
// returns false.
func scanStrings(ctx context.Context, rdb redis.UniversalClient, pattern string, each func(key string) bool) error {
	var mu sync.Mutex
	scan := func(ctx context.Context, c redis.Cmdable) error {
		iter := c.ScanType(ctx, 0, pattern, 500, "string").Iterator()
		for iter.Next(ctx) {
			mu.Lock()
			more := each(iter.Val())
			mu.Unlock()
			if !more {
				return errStopScan
			}
		}
		return iter.Err()
	}
	var err error
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return scan(ctx, m) })
	} else {
		err = scan(ctx, rdb)
	}
	if errors.Is(err, errStopScan) {
		return nil
	}
	return err
}

func inspectCommand() *command {
	return &command{
		name:  "inspect",
		args:  "KEY",
		short: "show who holds one lock",
		long: `Inspect reads one lock key from Redis in one step and shows its holder: owner,
lease id, fencing token, when it was taken, the TTL left and the fingerprint of
the stored value. Pass that fingerprint to 'lockscope release --fingerprint' to
release exactly the holder you saw. Exit status 1 if the key is not held.

A lock taken by another library (redis-py, node-redlock, redsync, redislock)
is named by its library and the first 8 digits of its value's fingerprint:
its value is that library's secret token (whoever knows it can extend or
release the lock), printed only with --reveal.`,
		define: func(f *flagSet) func(context.Context, *Env, []string) error {
			f.minArgs, f.maxArgs = 1, 1
			var rc redisConfig
			rc.defineConn(f)
			var asJSON, reveal bool
			f.Bool(&asJSON, "json", "LOCKSCOPE_JSON", false, "print JSON instead of text")
			f.Bool(&reveal, "reveal", "LOCKSCOPE_REVEAL", false, "also print a foreign lock's raw value (another library's secret token)")
			return func(ctx context.Context, env *Env, args []string) error {
				rdb, err := rc.connect(ctx)
				if err != nil {
					return err
				}
				defer rdb.Close()
				key := args[0]
				h, err := lock.New(rdb, nil).Inspect(ctx, key)
				if errors.Is(err, lock.ErrNotHeld) {
					return fmt.Errorf("%s is not held", displayKey(key, 200))
				}
				if err != nil {
					return err
				}
				now := time.Now()
				if asJSON {
					enc := json.NewEncoder(env.Stdout)
					enc.SetIndent("", "  ")
					j := toJSON(h, now)
					if reveal && h.Foreign {
						j.Value, j.ValueB64 = &h.Value, b64IfInvalid(h.Value)
					}
					return enc.Encode(j)
				}
				printHolder(env.Stdout, h, now)
				if reveal && h.Foreign {
					fmt.Fprintf(env.Stdout, "value:        %s\n", displayKey(h.Value, 0))
				}
				return nil
			}
		},
	}
}

func printHolder(w io.Writer, h *lock.Holder, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "key:\t%s\n", displayKey(h.Key, 0))
	if h.Foreign {
		fmt.Fprintf(tw, "holder:\t(foreign) %s\n", displayKey(h.Owner, 0))
	} else {
		fmt.Fprintf(tw, "holder:\t%s\n", displayKey(h.Owner, 0))
		fmt.Fprintf(tw, "lease:\t%s\n", h.Lease)
		fmt.Fprintf(tw, "held for:\t%s (since %s)\n", formatHeld(h, now), h.Since.UTC().Format(time.RFC3339Nano))
	}
	if h.Fence > 0 {
		fmt.Fprintf(tw, "fence:\t%d\n", h.Fence)
	}
	fmt.Fprintf(tw, "ttl:\t%s\n", formatTTL(h.TTL))
	if h.Degraded {
		fmt.Fprintf(tw, "degraded:\tprocess-local lock (Redis was unreachable)\n")
	}
	fmt.Fprintf(tw, "fingerprint:\t%s\n", h.Fingerprint)
	tw.Flush()
}

func releaseCommand() *command {
	return &command{
		name:  "release",
		args:  "KEY --reason REASON",
		short: "force-release a lock, only if it is still held by the holder you saw",
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
sees the loss at its next renewal.`,
		define: func(f *flagSet) func(context.Context, *Env, []string) error {
			f.minArgs, f.maxArgs = 1, 1
			var rc redisConfig
			rc.defineConn(f)
			rc.defineStream(f, "Redis stream the forced-release event is written to")
			var reason, fingerprint, by string
			var yes, anyHolder bool
			f.String(&reason, "reason", "", "", "why the lock is released (required; recorded with the event)")
			f.Bool(&anyHolder, "any-holder", "LOCKSCOPE_RELEASE_ANY_HOLDER", false, "for a constant value without expiry (which cannot tell its holder from a successor): release whoever holds it")
			f.String(&fingerprint, "fingerprint", "", "", "release only if the holder's fingerprint is this one")
			f.String(&by, "operator-user", "LOCKSCOPE_OPERATOR_USER", "", "who releases, recorded with the event (default $USER)")
			f.Bool(&yes, "yes", "LOCKSCOPE_ASSUME_YES", false, "do not ask for confirmation")
			return func(ctx context.Context, env *Env, args []string) error {
				key := args[0]
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
				return release(ctx, env, rdb, rc.stream, rc.partitions, key, fingerprint, by, reason, yes, anyHolder)
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
	lc := lock.New(rdb, &lock.Options{Recorder: em})
	h, err := lc.Inspect(ctx, key)
	if errors.Is(err, lock.ErrNotHeld) {
		return fmt.Errorf("%s is not held; nothing to release", displayKey(key, 200))
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
			return &Error{Code: ExitOwnerChanged, Err: fmt.Errorf("%s holds a constant value without expiry: a successor would look the same, so nothing was released; --any-holder releases whoever holds it when you confirm", displayKey(key, 200))}
		}
		fmt.Fprintln(env.Stdout, "warning: this holder cannot be told from a successor with the same value: whoever holds it when you confirm is released")
		fingerprint += "@any"
	}
	if !yes {
		fmt.Fprintf(env.Stdout, "Force-release %s? Its holder loses the lock at its next renewal. Type 'yes' to confirm: ", displayKey(key, 200))
		line, err := bufio.NewReader(env.Stdin).ReadString('\n')
		answer := strings.ToLower(strings.TrimSpace(line))
		if err != nil && answer == "" {
			fmt.Fprintln(env.Stdout)
			return errors.New("not confirmed: no answer on stdin (use --yes to skip the confirmation)")
		}
		if answer != "yes" {
			return errors.New("not confirmed; nothing was released")
		}
	}
	released, err := lc.ForceRelease(ctx, key, fingerprint, by, reason)
	switch {
	case errors.Is(err, lock.ErrOwnerChanged):
		return ownerChanged(key, released)
	case errors.Is(err, lock.ErrAmbiguous):
		return &Error{Code: ExitOwnerChanged, Err: fmt.Errorf("%s holds a constant value without expiry: a successor would look the same, so nothing was released; --any-holder releases whoever holds it", displayKey(key, 200))}
	case errors.Is(err, lock.ErrNotHeld):
		return &Error{Code: ExitOwnerChanged, Err: fmt.Errorf("owner changed: %s is no longer held; nothing was released", displayKey(key, 200))}
	case err != nil:
		return err
	}
	if err := em.Flush(ctx); err != nil {
		fmt.Fprintf(env.Stderr, "warning: the release happened but its event could not be written to %s: %v\n", stream, err)
	}
	fmt.Fprintf(env.Stdout, "released %s (held by %s for %s), recorded as forced by %s: %s\n",
		displayKey(key, 200), displayKey(released.Owner, 100), formatHeld(released, now), by, reason)
	return nil
}

func ownerChanged(key string, now *lock.Holder) error {
	who := "someone else"
	if now != nil {
		who = displayKey(now.Owner, 100) + " (fingerprint " + now.Fingerprint[:12] + ")"
	}
	return &Error{Code: ExitOwnerChanged, Err: fmt.Errorf("owner changed: %s is now held by %s; nothing was released", displayKey(key, 200), who)}
}
