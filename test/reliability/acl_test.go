package reliability

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"os"
	"os/exec"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/collector"
	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/redisson"
	"github.com/lockscope/lockscope/internal/testkit/redissontest"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/lockscope/lockscope/internal/testkit/syncbuf"
	"github.com/lockscope/lockscope/lock"
)

// The ACL lines are read from docs/acl.md, verbatim, so the documentation
// and what is tested cannot drift apart.
const aclDoc = "../../docs/acl.md"

// aclLine is one "ACL SETUSER" line of the document.
type aclLine struct {
	user   string
	tokens []string // everything after the user name
}

// perms returns the indexes of the tokens that grant something: commands,
// key patterns and channels. Each must be needed.
func (l aclLine) perms() []int {
	var out []int
	for i, tok := range l.tokens {
		switch tok[0] {
		case '+', '~', '%', '&', '(':
			out = append(out, i)
		}
	}
	return out
}

func (l aclLine) password() string {
	for _, tok := range l.tokens {
		if strings.HasPrefix(tok, ">") {
			return tok[1:]
		}
	}
	return ""
}

// without returns the line for user name with token i removed (-1: none).
func (l aclLine) without(name string, i int) aclLine {
	out := aclLine{user: name}
	for j, tok := range l.tokens {
		if j != i {
			out.tokens = append(out.tokens, tok)
		}
	}
	return out
}

func (l aclLine) apply(ctx context.Context, admin *redis.Client) error {
	args := []any{"ACL", "SETUSER", l.user}
	for _, tok := range l.tokens {
		args = append(args, tok)
	}
	return admin.Do(ctx, args...).Err()
}

// joinSelectors joins the words of a selector, "(~k:* +get +set)", into one
// token: ACL SETUSER takes it as one argument.
func joinSelectors(words []string) []string {
	var out []string
	for i := 0; i < len(words); i++ {
		w := words[i]
		if strings.HasPrefix(w, "(") {
			for !strings.HasSuffix(w, ")") && i+1 < len(words) {
				i++
				w += " " + words[i]
			}
		}
		out = append(out, w)
	}
	return out
}

// readACLDoc returns the document's ACL SETUSER lines by user, in order.
func readACLDoc(t *testing.T) map[string][]aclLine {
	t.Helper()
	f, err := os.Open(aclDoc)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := make(map[string][]aclLine)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := joinSelectors(strings.Fields(sc.Text()))
		if len(fields) < 4 || fields[0] != "ACL" || fields[1] != "SETUSER" {
			continue
		}
		out[fields[2]] = append(out[fields[2]], aclLine{user: fields[2], tokens: fields[3:]})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{"app", "lockscope-collector", "lockscope-operator"} {
		if len(out[u]) == 0 {
			t.Fatalf("%s has no ACL SETUSER line for user %q", aclDoc, u)
		}
	}
	return out
}

func userClient(srv *redistest.Server, user, password string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: user, Password: password,
		MaxRetries: -1, ContextTimeoutEnabled: true})
}

// A capability that runs a collector watches it until everything it should
// do has been seen, for at most a budget. With the documented ACL the budget
// is generous: it only ends a run that fails, and the runs without a
// permission, which must fail and so spend their whole budget, run at the
// same time on the same cores. Without a permission it is short.
const (
	budgetDocumented = 25 * time.Second
	budgetStripped   = 4 * time.Second
)

// checkMinimal applies the full lines and checks that capability works,
// then removes each permission of line `strip` in turn and checks that it
// fails: every permission documented is needed.
func checkMinimal(t *testing.T, srv *redistest.Server, lines []aclLine, strip int, parallel bool, capability func(ctx context.Context, t *testing.T, user string, rdb *redis.Client, budget time.Duration) error) {
	t.Helper()
	admin := srv.Client(t)
	variant := func(name string, drop int, budget time.Duration) error {
		ctx := testCtx(t, budget+time.Minute)
		for i, l := range lines {
			d := -1
			if i == strip {
				d = drop
			}
			if err := l.without(name, d).apply(ctx, admin); err != nil {
				t.Fatalf("ACL SETUSER %s: %v", name, err)
			}
		}
		rdb := userClient(srv, name, lines[0].password())
		defer rdb.Close()
		return capability(ctx, t, name, rdb, budget)
	}
	// Parallel checks of the same user's lines must not share user names.
	tag := path.Base(t.Name())
	t.Run("as documented", func(t *testing.T) {
		if parallel {
			t.Parallel()
		}
		if err := variant(fmt.Sprintf("%s-%s-%d-full", lines[0].user, tag, strip), -1, budgetDocumented); err != nil {
			t.Errorf("with the documented ACL: %v", err)
		}
	})
	for n, i := range lines[strip].perms() {
		tok := lines[strip].tokens[i]
		t.Run("without "+tok, func(t *testing.T) {
			if parallel && tok != "+eval" && tok != "+evalsha" {
				// Scripts loaded by one variant would let another run
				// them without +eval: script checks run one at a time,
				// before the others.
				t.Parallel()
			}
			if err := variant(fmt.Sprintf("%s-%s-%d-without-%d", lines[0].user, tag, strip, n), i, budgetStripped); err == nil {
				t.Errorf("still works without %q: the documented line grants more than needed", tok)
			} else {
				t.Logf("fails as it should: %v", firstLine(err.Error()))
			}
		})
	}
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

// startACLServer starts a Redis whose administrator has set
// notify-keyspace-events, as docs/acl.md asks (the collector's user may not).
func startACLServer(t *testing.T) *redistest.Server {
	return redistest.Start(t, redistest.Options{Notify: "KEg$x"})
}

// TestACLApplications: the lock library works with the "app" user of
// docs/acl.md, every lock operation (with and without fencing, for the three
// forms of fence keys) and the emitter, and needs every permission it has.
func TestACLApplications(t *testing.T) {
	t.Parallel()
	srv := startACLServer(t)
	admin := srv.Client(t)
	checkMinimal(t, srv, readACLDoc(t)["app"], 0, false, func(ctx context.Context, t *testing.T, user string, rdb *redis.Client, _ time.Duration) error {
		// A restarted server knows no scripts: the EVAL fallback must work.
		if err := admin.ScriptFlush(ctx).Err(); err != nil {
			return err
		}
		em := lock.NewEmitter(rdb, nil)
		defer em.Close(context.Background())
		c := lock.New(rdb, &lock.Options{Owner: user, Recorder: em})
		other := lock.New(rdb, &lock.Options{Owner: "other"})
		keys := []string{
			"app:job:" + user,        // fence key lockscope:fence:{app:job:...}
			"app:{" + user + "}:run", // hash tag: lockscope:fence:t:app:{...}:run
			"app:a}b:" + user,        // braces without a tag: lockscope:fence:s:{..}app:...
		}
		for i, key := range keys {
			l, err := c.Obtain(ctx, key, 10*time.Second, &lock.ObtainOptions{Fencing: i < len(keys)})
			if err != nil {
				return fmt.Errorf("Obtain(%q): %w", key, err)
			}
			if l.Fence() <= 0 {
				return fmt.Errorf("Obtain(%q) fence = %d, want > 0", key, l.Fence())
			}
			// Contention: the obtain script reads the holder and its PTTL.
			_, h, err := other.Try(ctx, key, time.Second, nil)
			if !errors.Is(err, lock.ErrNotObtained) || h == nil || h.TTL <= 0 {
				return fmt.Errorf("Try(%q) on a held lock = %+v, %v; want the holder and its TTL", key, h, err)
			}
			if err := l.Refresh(ctx, 20*time.Second); err != nil {
				return fmt.Errorf("Refresh(%q): %w", key, err)
			}
			if ttl, err := l.TTL(ctx); err != nil || ttl <= 10*time.Second {
				return fmt.Errorf("TTL(%q) = %v, %v; want > 10s after Refresh", key, ttl, err)
			}
			if err := l.Release(ctx); err != nil {
				return fmt.Errorf("Release(%q): %w", key, err)
			}
		}
		if _, err := c.Obtain(ctx, "app:plain:"+user, time.Second, nil); err != nil {
			return fmt.Errorf("Obtain without fencing: %w", err)
		}
		// lockscope load (the workload of the compose stack) checks Redis
		// with PING at start-up; the run below proves the rest.
		if err := rdb.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("PING: %w", err)
		}
		if err := em.Flush(ctx); err != nil {
			return fmt.Errorf("emitter: %w", err)
		}
		if st := em.Stats(); st.Sent == 0 || st.Dropped != 0 {
			return fmt.Errorf("emitter stats %+v, want events sent and none dropped", st)
		}
		return nil
	})

	// `lockscope load --key-prefix app:` runs as the documented user: every
	// scenario's lock operations and events, no error.
	ctx := testCtx(t, 60*time.Second)
	line := readACLDoc(t)["app"][0]
	if err := line.without("app-load", -1).apply(ctx, admin); err != nil {
		t.Fatal(err)
	}
	bin := redistest.Lockscope(t)
	out, err := exec.CommandContext(ctx, bin, "load", "--redis", "redis://app-load:"+line.password()+"@"+srv.Addr(),
		"--key-prefix", "app:", "--duration", "2s", "--report-every", "1s").CombinedOutput()
	if err != nil || !strings.Contains(string(out), " errors=0 ") || !strings.Contains(string(out), "dropped=0\n") {
		t.Errorf("lockscope load as the documented app user: %v\n%s", err, out)
	}
}

// TestACLCollector: the collector works with the "lockscope-collector" user
// of docs/acl.md: it creates its group, reads and acknowledges, claims,
// reports lag, and confirms expirations through notifications; with the
// passive-watch line it also follows other libraries' locks. Every
// permission of both lines is needed.
func TestACLCollector(t *testing.T) {
	t.Parallel()
	srv := startACLServer(t)
	admin := srv.Client(t)
	lines := readACLDoc(t)["lockscope-collector"]
	if len(lines) != 6 {
		t.Fatalf("%s has %d lines for lockscope-collector, want 6 (stream, replicas, incidents, passive watch, semaphores, lock order)", aclDoc, len(lines))
	}
	// First, before the others start: each of them runs the stream read
	// script, which would let this check's variant without +eval run it
	// by its SHA (each collector here starts with SCRIPT FLUSH, and the
	// variants without a script grant run alone, see checkMinimal).
	t.Run("stream", func(t *testing.T) {
		checkMinimal(t, srv, lines[:1], 0, true, func(ctx context.Context, t *testing.T, user string, rdb *redis.Client, budget time.Duration) error {
			return collectorCapability(ctx, t, admin, user, rdb, false, budget)
		})
	})
	t.Run("replica", func(t *testing.T) {
		t.Parallel()
		checkMinimal(t, srv, lines[:2], 1, true, func(ctx context.Context, t *testing.T, user string, rdb *redis.Client, budget time.Duration) error {
			return replicaCapability(ctx, t, admin, user, rdb, budget)
		})
	})
	t.Run("incidents", func(t *testing.T) {
		t.Parallel()
		// One variant at a time, each after SCRIPT FLUSH: the script
		// another variant loaded would run without +eval.
		checkMinimal(t, srv, []aclLine{lines[0], lines[2]}, 1, false, func(ctx context.Context, t *testing.T, user string, rdb *redis.Client, _ time.Duration) error {
			return incidentsCapability(ctx, admin, user, rdb)
		})
	})
	t.Run("lockorder", func(t *testing.T) {
		t.Parallel()
		checkMinimal(t, srv, []aclLine{lines[0], lines[5]}, 1, false, func(ctx context.Context, t *testing.T, user string, rdb *redis.Client, _ time.Duration) error {
			return lockOrderCapability(ctx, admin, rdb)
		})
	})
	t.Run("semaphores", func(t *testing.T) {
		t.Parallel()
		checkMinimal(t, srv, []aclLine{lines[0], lines[4]}, 1, false, func(ctx context.Context, t *testing.T, user string, rdb *redis.Client, _ time.Duration) error {
			return semaphoreCapability(ctx, admin, user, rdb)
		})
	})
	watchLines := []aclLine{lines[0], lines[3]}
	t.Run("watch", func(t *testing.T) {
		t.Parallel()
		// One variant at a time: scripts another variant loaded would run
		// without +eval (each variant starts with SCRIPT FLUSH).
		checkMinimal(t, srv, watchLines, 1, false, func(ctx context.Context, t *testing.T, user string, rdb *redis.Client, budget time.Duration) error {
			return collectorCapability(ctx, t, admin, user, rdb, true, budget)
		})
	})
}

// collectorCapability runs a collector as user until everything it should
// do has been seen, or for budget, and reports what did not happen.
func collectorCapability(ctx context.Context, t *testing.T, admin *redis.Client, user string, rdb *redis.Client, watch bool, budget time.Duration) error {
	const stream = event.DefaultStream
	group := "g-" + user
	if err := rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("PING (serve's start-up check): %w", err)
	}
	xadd := func(key string, ttl time.Duration) {
		e := event.Event{Type: event.Acquired, Key: key, Owner: "app", Lease: key, TS: time.Now().UnixNano(), TTL: ttl}
		if err := admin.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: event.AppendFields(nil, &e)}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// Written before the collector starts: the group's backfill counts it.
	backfilled := "app:col:" + user
	xadd(backfilled, time.Hour)
	// Held before the collector starts: only the rescan can find it.
	pre, live := "lock:pre:"+user, "lock:live:"+user
	const pyPre, pyLive = "f38f5694e9a511f18bee02fc00000001", "f38f5b8ae9a511f18bee02fc00000001" // redis-py's uuid1 tokens
	// Redisson's locks, as Java Redisson writes them: a lock (a hash), one
	// with a client waiting on its channel, a fair lock with a queued
	// waiter.
	rlock, rfair := "lock:rz:"+user, "lock:rf:"+user
	const holderField, waiterField = "6d2b8f4e-1c3a-4b5d-9e6f-7a8b9c0d1e2f:7", "7e3c9f5a-2d4b-4c6e-8f7a-8b9cad1e2f30:8"
	if watch {
		admin.Set(ctx, pre, pyPre, time.Minute)
		for _, k := range []string{rlock, rfair} {
			admin.HSet(ctx, k, holderField, 1)
			admin.PExpire(ctx, k, time.Minute)
		}
		admin.RPush(ctx, "redisson_lock_queue:{"+rfair+"}", waiterField)
		admin.ZAdd(ctx, "redisson_lock_timeout:{"+rfair+"}", redis.Z{Score: float64(time.Now().Add(time.Minute).UnixMilli()), Member: waiterField})
		sub := admin.Subscribe(ctx, "redisson_lock__channel:{"+rlock+"}")
		defer sub.Close()
		if _, err := sub.Receive(ctx); err != nil {
			t.Fatal(err)
		}
	}

	if err := admin.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	agg, reg := newAggregator(t, state.Config{})
	// Entries of a dead consumer stay pending for the whole check.
	var logs syncbuf.Buffer
	opt := &collector.Options{Stream: stream, Group: group, Consumer: "c", ClaimMinIdle: time.Hour,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	if watch {
		opt.Watch = []string{"lock:*"}
	}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- collector.New(rdb, agg, opt).Run(cctx) }()
	defer func() { cancel(); <-done }()

	passive := func(key, owner string) bool {
		l, ok := agg.Lock(key)
		return ok && l.Held && l.Passive && l.Owner == lock.ForeignOwner(owner) && l.TTL > 0 && l.TTL <= time.Minute
	}
	var problems []string
	deadline := time.Now().Add(budget)
	for i := 0; time.Now().Before(deadline); i++ {
		// A lock that expires while held: a notification confirms it.
		exp := fmt.Sprintf("app:exp:%s:%d", user, i)
		xadd(exp, 150*time.Millisecond)
		admin.Set(ctx, exp, "v", 150*time.Millisecond)
		if watch && i == 2 {
			admin.Set(ctx, live, pyLive, time.Minute)
		}
		if i == 2 {
			// Another consumer of the group reads an entry and dies. In one
			// transaction, so the collector's blocked read cannot take it.
			pipe := admin.TxPipeline()
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []string{"v", "1", "type", "acquired", "key", "app:dead"}})
			pipe.XReadGroup(ctx, &redis.XReadGroupArgs{Group: group, Consumer: "dead", Streams: []string{stream, ">"}, Count: 1, Block: -1})
			pipe.Exec(ctx) // NOGROUP when the collector could not create it
		}
		redistest.Sleep(ctx, 200*time.Millisecond)

		problems = problems[:0]
		if err := agg.Health(); err != nil {
			problems = append(problems, "health: "+err.Error())
		}
		if strings.Contains(logs.String(), "EVALSHA refused") {
			problems = append(problems, "the stream read script was refused: reads are not bounded in bytes")
		}
		if l, ok := agg.Lock(backfilled); !ok || !l.Held {
			problems = append(problems, "the backfilled event was not applied")
		}
		if p, err := admin.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: stream, Group: group, Consumer: "c", Start: "-", End: "+", Count: 10}).Result(); err != nil || len(p) != 0 {
			problems = append(problems, fmt.Sprintf("entries left unacknowledged (%d, %v)", len(p), err))
		}
		if got := gather(t, reg).sum("lockscope_stream_pending_entries"); i < 3 || got != 1 {
			problems = append(problems, fmt.Sprintf("lockscope_stream_pending_entries = %v, want the dead consumer's 1 (XINFO)", got))
		}
		confirmed := false
		for _, x := range agg.Expirations(256) {
			confirmed = confirmed || x.Confirmed && strings.HasPrefix(x.Key, "app:exp:"+user+":")
		}
		if !confirmed {
			problems = append(problems, "no expiration confirmed by a keyspace notification")
		}
		if watch && !passive(pre, pyPre) {
			problems = append(problems, "the watched lock held before start was not found (rescan)")
		}
		if watch && (i < 3 || !passive(live, pyLive)) {
			problems = append(problems, "the watched lock taken while running was not followed")
		}
		if l, _ := agg.Lock(rlock); watch && (!l.Held || l.Owner != "redisson 6d2b8f4e:7" || l.Waiters != 1) {
			problems = append(problems, fmt.Sprintf("the Redisson lock and its waiter on the channel: %+v", l.LockInfo))
		}
		if l, _ := agg.Lock(rfair); watch && (len(l.WaitersNow) != 1 || l.WaitersNow[0].Owner != "redisson 7e3c9f5a:8") {
			problems = append(problems, fmt.Sprintf("the Redisson fair lock's queued waiter: %+v", l.WaitersNow))
		}
		if len(problems) == 0 {
			return nil
		}
	}
	return errors.New(strings.Join(problems, "; "))
}

// replicaCapability runs a collector as a replica (its own group) as user,
// restarts it, and reports what did not happen: the replay of an event
// written before it started, the event written while it was down, the
// checkpoint and presence keys, the group recreated after the replay.
func replicaCapability(ctx context.Context, t *testing.T, admin *redis.Client, user string, rdb *redis.Client, budget time.Duration) error {
	const stream = event.DefaultStream
	xadd := func(key string) {
		e := event.Event{Type: event.Acquired, Key: key, Owner: "app", Lease: key, TS: time.Now().UnixNano(), TTL: time.Hour, Attempts: 1}
		if err := admin.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: event.AppendFields(nil, &e)}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	var logs syncbuf.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	run := func(agg *state.Aggregator) func() {
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		opt := &collector.Options{Stream: stream, Replica: "r-" + user, Logger: log}
		go func() { done <- collector.New(rdb, agg, opt).Run(cctx) }()
		return func() { cancel(); <-done }
	}
	held := func(agg *state.Aggregator, key string) bool { l, ok := agg.Lock(key); return ok && l.Held }
	before, down := "app:before:"+user, "app:down:"+user
	xadd(before)
	first, _ := newAggregator(t, state.Config{})
	stop := run(first)
	wctx, wcancel := context.WithTimeout(ctx, budget)
	ok := redistest.Poll(wctx, func() bool { return first.Health() == nil && held(first, before) })
	wcancel()
	// A presence refresh after the replay, or the warning that it failed.
	replayed := time.Now()
	pctx, pcancel := context.WithTimeout(ctx, budget)
	redistest.Poll(pctx, func() bool {
		return !presenceMark(ctx, admin, collector.PresenceKey(stream, "r-"+user)).Before(replayed.Truncate(time.Millisecond)) || logs.String() != ""
	})
	pcancel()
	stop()
	if !ok {
		return fmt.Errorf("first start: health %v, event written before it replayed: %v; log: %s", first.Health(), held(first, before), logs.String())
	}
	xadd(down)
	second, _ := newAggregator(t, state.Config{})
	restarted := time.Now().Truncate(time.Millisecond)
	defer run(second)()
	var problems []string
	deadline := time.Now().Add(budget)
	for time.Now().Before(deadline) {
		problems = problems[:0]
		if err := second.Health(); err != nil {
			problems = append(problems, "health after restart: "+err.Error())
		}
		if !held(second, before) {
			problems = append(problems, "the event written before the first start was not replayed after the restart")
		}
		if !held(second, down) {
			problems = append(problems, "the event written while down was not applied")
		}
		if l := logs.String(); strings.Contains(l, "refused") || strings.Contains(l, "cannot keep") || strings.Contains(l, "could not") {
			problems = append(problems, "warnings: "+l)
		}
		if len(problems) == 0 {
			break
		}
		redistest.Sleep(ctx, 100*time.Millisecond)
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	// The checkpoint is written every few seconds: wait for one by the
	// restarted collector ("lsck1|<unix ms>|..."), or the warning that it
	// could not be, and want no warning.
	cctx, ccancel := context.WithTimeout(ctx, budget+10*time.Second)
	defer ccancel()
	if !redistest.Poll(cctx, func() bool {
		v := strings.Split(admin.Get(ctx, collector.CheckpointKey(stream)).Val(), "|")
		ms, err := strconv.ParseInt(v[min(1, len(v)-1)], 10, 64)
		return err == nil && !time.UnixMilli(ms).Before(restarted) || strings.Contains(logs.String(), "checkpoint")
	}) {
		return errors.New("no checkpoint written after the restart; log: " + logs.String())
	}
	if l := logs.String(); strings.Contains(l, "checkpoint") {
		return errors.New("checkpoint: " + l)
	}
	return nil
}

// incidentsCapability writes incidents into the shared history as user,
// past its bound (so that the least recent are dropped), and lists them.
func incidentsCapability(ctx context.Context, admin *redis.Client, user string, rdb *redis.Client) error {
	if err := admin.ScriptFlush(ctx).Err(); err != nil {
		return err
	}
	s := collector.NewIncidentStore(rdb, event.DefaultStream, &collector.IncidentOptions{Max: 1, Logger: quietLog()})
	start := time.Now().Truncate(time.Millisecond)
	for i := range 3 {
		s.Incident(state.Incident{ID: fmt.Sprintf("stuck:%s:%d", user, i), Kind: state.IncidentStuck, Keys: []string{"app:k"},
			Start: start.Add(time.Duration(i) * time.Second), Count: 1})
	}
	if err := s.Flush(ctx); err != nil {
		return fmt.Errorf("writing the incident history: %w", err)
	}
	got, err := s.List(ctx, 0)
	if err != nil {
		return fmt.Errorf("listing the incident history: %w", err)
	}
	if len(got) != 1 || got[0].ID != fmt.Sprintf("stuck:%s:2", user) {
		return fmt.Errorf("incident history = %+v, want only the newest of the three (bound 1)", got)
	}
	if ttl := admin.PTTL(ctx, collector.IncidentsKey(event.DefaultStream)).Val(); ttl <= 0 {
		return fmt.Errorf("incident history PTTL = %v, want it to expire", ttl)
	}
	return nil
}

// lockOrderCapability writes lock-order edges into the shared graph as
// the user's client, twice (so that records merge) and past its bound (so
// that the least recently seen are dropped), and reads them back.
func lockOrderCapability(ctx context.Context, admin, rdb *redis.Client) error {
	if err := admin.ScriptFlush(ctx).Err(); err != nil {
		return err
	}
	admin.Del(ctx, collector.LockOrderKey(event.DefaultStream))
	s := collector.NewLockOrderStore(rdb, event.DefaultStream, &collector.LockOrderOptions{Logger: quietLog()})
	now := time.Now().Truncate(time.Millisecond)
	n := state.MaxOrderEdges + state.MaxOrderEdges/4 + 1
	for round := range 2 {
		es := make([]state.OrderEdge, 0, n)
		for i := range n {
			at := now.Add(-time.Duration(n-i) * time.Second)
			es = append(es, state.OrderEdge{From: fmt.Sprintf("c%d:*", i), To: "z:*", Count: int64(round + 1), FirstSeen: at, LastSeen: at})
		}
		s.LockOrderEdges(es)
		if err := s.Flush(ctx); err != nil {
			return fmt.Errorf("writing the lock-order graph: %w", err)
		}
	}
	got, err := s.Load(ctx)
	if err != nil {
		return fmt.Errorf("reading the lock-order graph: %w", err)
	}
	if len(got) != state.MaxOrderEdges || got[0].Count != 2 {
		return fmt.Errorf("lock-order graph: %d edges (count %d), want %d (its bound) merged to count 2", len(got), got[0].Count, state.MaxOrderEdges)
	}
	if ttl := admin.PTTL(ctx, collector.LockOrderKey(event.DefaultStream)).Val(); ttl <= 0 {
		return fmt.Errorf("lock-order graph PTTL = %v, want it to expire", ttl)
	}
	return nil
}

// TestACLOperator: `lockscope locks` and `lockscope release` (the commands,
// run in-process) work with the "lockscope-operator" user of docs/acl.md,
// the forced release is recorded in the stream, and every permission is
// needed.
func TestACLOperator(t *testing.T) {
	t.Parallel()
	srv := startACLServer(t)
	admin := srv.Client(t)
	line := readACLDoc(t)["lockscope-operator"]
	checkMinimal(t, srv, line, 0, false, func(ctx context.Context, t *testing.T, user string, _ *redis.Client, _ time.Duration) error {
		if err := admin.ScriptFlush(ctx).Err(); err != nil {
			return err
		}
		key := "app:op:" + user
		l, err := lock.New(admin, &lock.Options{Owner: "app-1"}).Obtain(ctx, key, time.Minute, &lock.ObtainOptions{Fencing: true})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
		u := (&url.URL{Scheme: "redis", User: url.UserPassword(user, line[0].password()), Host: srv.Addr(), Path: "/0"}).String()
		var out, errOut bytes.Buffer
		env := cliEnv{t: t, stdout: &out, stderr: &errOut}
		if err := runCLI(ctx, env, []string{"locks", "app:op:" + user + "*", "--json", "--redis", u}); err != nil {
			return fmt.Errorf("lockscope locks: %v", err)
		}
		var listed []struct{ Key, Owner string }
		if err := json.Unmarshal(out.Bytes(), &listed); err != nil || len(listed) != 1 || listed[0].Key != key || listed[0].Owner != "app-1" {
			return fmt.Errorf("lockscope locks --json = %s (%v), want %q held by app-1", out.String(), err, key)
		}
		if err := runCLI(ctx, env, []string{"release", key, "--reason", "acl test", "--yes", "--operator-user", "op", "--redis", u}); err != nil {
			return fmt.Errorf("lockscope release: %v", err)
		}
		if n := admin.Exists(ctx, key).Val(); n != 0 {
			return fmt.Errorf("%q still exists after lockscope release", key)
		}
		// Every lock of one owner, the prefix as the pattern.
		dead := "app-2/" + user
		var keys []string
		for _, k := range []string{"app:op2:" + user + ":a", "app:op2:" + user + ":b"} {
			l, err := lock.New(admin, &lock.Options{Owner: dead}).Obtain(ctx, k, time.Minute, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Release(ctx)
			keys = append(keys, k)
		}
		out.Reset()
		if err := runCLI(ctx, env, []string{"release", "--owner", dead, "app:*", "--reason", "acl test", "--yes", "--operator-user", "op", "--redis", u}); err != nil {
			return fmt.Errorf("lockscope release --owner: %v", err)
		}
		if n := admin.Exists(ctx, keys...).Val(); n != 0 {
			return fmt.Errorf("%d of %q still exist after lockscope release --owner: %s", n, keys, out.String())
		}
		want := map[string]bool{key: true, keys[0]: true, keys[1]: true}
		for _, e := range redistest.ReadStream(t, admin, event.DefaultStream).Events {
			if e.Type == event.Forced && e.By == "op" && e.Reason == "acl test" && (e.Key == key && e.Owner == "app-1" || e.Key != key && e.Owner == dead) {
				delete(want, e.Key)
			}
		}
		if len(want) > 0 {
			return fmt.Errorf("the forced releases of %q are not in the stream (stderr: %s)", slices.Sorted(maps.Keys(want)), strings.TrimSpace(errOut.String()))
		}
		return nil
	})
}

// TestACLOperatorRedisson: `lockscope release` of Redisson's locks works
// with the "lockscope-operator" lines of docs/acl.md: a fair lock whose
// queue begins with a waiter past its timeout (dropped, the next one woken,
// as Redisson's own unlock does) and a read lock (woken on the read-write
// channel); every permission of the Redisson line is needed.
func TestACLOperatorRedisson(t *testing.T) {
	t.Parallel()
	srv := startACLServer(t)
	admin := srv.Client(t)
	lines := readACLDoc(t)["lockscope-operator"]
	if len(lines) < 2 {
		t.Fatalf("%s has %d lines for lockscope-operator, want at least 2 (locks, Redisson's locks)", aclDoc, len(lines))
	}
	lines = lines[:2] // the third, asking holders to release, is TestACLAsk's
	checkMinimal(t, srv, lines, 1, false, func(ctx context.Context, t *testing.T, user string, _ *redis.Client, _ time.Duration) error {
		if err := admin.ScriptFlush(ctx).Err(); err != nil {
			return err
		}
		const holder, stale, next = "6d2b8f4e-1c3a-4b5d-9e6f-7a8b9c0d1e2f:1", "7e3c9f5a-2d4b-4c6e-8f7a-8b9cad1e2f30:2", "8f4da06b-3e5c-4d7f-9a8b-9cadbe2f3041:3"
		fair, rw := "app:fair:"+user, "app:rw:"+user
		queue, timeouts := "redisson_lock_queue:{"+fair+"}", "redisson_lock_timeout:{"+fair+"}"
		admin.HSet(ctx, fair, holder, 1)
		admin.PExpire(ctx, fair, time.Minute)
		admin.RPush(ctx, queue, stale, next)
		admin.ZAdd(ctx, timeouts, redis.Z{Score: float64(time.Now().Add(-time.Second).UnixMilli()), Member: stale},
			redis.Z{Score: float64(time.Now().Add(time.Minute).UnixMilli()), Member: next})
		admin.HSet(ctx, rw, "mode", "read", holder, 1)
		admin.PExpire(ctx, rw, time.Minute)
		sub := admin.Subscribe(ctx, "redisson_lock__channel:{"+fair+"}:"+next, "redisson_rwlock:{"+rw+"}")
		defer sub.Close()
		for range 2 {
			if _, err := sub.Receive(ctx); err != nil {
				t.Fatal(err)
			}
		}
		u := (&url.URL{Scheme: "redis", User: url.UserPassword(user, lines[0].password()), Host: srv.Addr(), Path: "/0"}).String()
		for _, key := range []string{fair, rw} {
			var out, errOut bytes.Buffer
			if err := runCLI(ctx, cliEnv{t: t, stdout: &out, stderr: &errOut}, []string{"release", key, "--reason", "acl test", "--yes", "--operator-user", "op", "--redis", u}); err != nil {
				return fmt.Errorf("lockscope release %s: %v (%s)", key, err, strings.TrimSpace(errOut.String()))
			}
			if n := admin.Exists(ctx, key).Val(); n != 0 {
				return fmt.Errorf("%q still exists after lockscope release", key)
			}
			m, err := sub.ReceiveMessage(ctx)
			if err != nil || m.Payload != "0" {
				return fmt.Errorf("after releasing %s: %v, %v; want Redisson's unlock message", key, m, err)
			}
		}
		if q := admin.LRange(ctx, queue, 0, -1).Val(); len(q) != 1 || q[0] != next {
			return fmt.Errorf("fair queue after the release = %q, want the waiter past its timeout dropped", q)
		}
		// A semaphore's counter is no lock: even --any-holder refuses it,
		// an expirable one (its permits' set) and one with a caller waiting.
		exp, plain := "app:sem:exp:"+user, "app:sem:plain:"+user
		admin.Set(ctx, exp, "2", 0)
		admin.ZAdd(ctx, redisson.SemaphoreTimeoutKey(exp), redis.Z{Score: float64(time.Now().Add(time.Hour).UnixMilli()), Member: "p1"})
		admin.Set(ctx, plain, "3", 0)
		semSub := admin.Subscribe(ctx, redisson.SemaphoreChannel(plain))
		defer semSub.Close()
		if _, err := semSub.Receive(ctx); err != nil {
			t.Fatal(err)
		}
		for _, key := range []string{exp, plain} {
			var out, errOut bytes.Buffer
			err := runCLI(ctx, cliEnv{t: t, stdout: &out, stderr: &errOut}, []string{"release", key, "--any-holder", "--reason", "acl test", "--yes", "--operator-user", "op", "--redis", u})
			if err == nil || admin.Exists(ctx, key).Val() != 1 || !strings.Contains(err.Error()+errOut.String(), "semaphore") {
				return fmt.Errorf("lockscope release --any-holder %s: %v (%s), exists %d; want refused as a semaphore", key, err, strings.TrimSpace(errOut.String()), admin.Exists(ctx, key).Val())
			}
		}
		return nil
	})
}

// semaphoreCapability: the dashboard reads an expirable Redisson semaphore
// (written by Java Redisson's scripts, as the administrator) as user: its
// permits available and in use, and the client waiting on its channel.
func semaphoreCapability(ctx context.Context, admin *redis.Client, user string, rdb *redis.Client) error {
	name := "sem:" + user
	keys := []string{name, redisson.SemaphoreTimeoutKey(name), redisson.SemaphoreChannel(name)}
	if err := admin.Eval(ctx, redissontest.SemaphoreTrySetPermits, []string{name, redisson.SemaphoreChannel(name)}, 3, "publish").Err(); err != nil {
		return err
	}
	if err := admin.Eval(ctx, redissontest.ExpirableTryAcquire, keys, 1, time.Now().Add(time.Hour).UnixMilli(), time.Now().UnixMilli(),
		redissontest.ExpirableNoLease, "publish", "\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f\x10").Err(); err != nil {
		return err
	}
	sub := admin.Subscribe(ctx, redisson.SemaphoreChannel(name))
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		return err
	}
	s, err := redisson.ReadSemaphore(ctx, rdb, name, time.Now())
	if err != nil {
		return fmt.Errorf("ReadSemaphore: %w", err)
	}
	if s.Available != 2 || !s.UsedKnown || s.Used != 1 || s.Waiters != 1 {
		return fmt.Errorf("semaphore = %+v, want 2 available, 1 in use, 1 waiter", s)
	}
	return nil
}

// cliEnv is where runCLI writes the command's output.
type cliEnv struct {
	t              *testing.T
	stdout, stderr *bytes.Buffer
}

// runCLI runs the lockscope binary with args, as an operator would.
func runCLI(ctx context.Context, env cliEnv, args []string) error {
	cmd := exec.CommandContext(ctx, redistest.Lockscope(env.t), args...)
	cmd.Stdout, cmd.Stderr = env.stdout, env.stderr
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LOCKSCOPE_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%v: %s", err, strings.TrimSpace(env.stderr.String()))
	}
	return nil
}
