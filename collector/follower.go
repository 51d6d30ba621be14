package collector

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/event"
	"github.com/redis/go-redis/v9"
)

// Defaults of Options.
const (
	DefaultGroup        = "lockscope" // the shared group of earlier versions (Options.Group)
	DefaultCount        = 64
	DefaultBlock        = 500 * time.Millisecond
	DefaultClaimMinIdle = 30 * time.Second
	DefaultBackfill     = 5 * time.Minute
)

// How often Run calls Aggregator.Tick and polls the stream's lag.
const (
	tickEvery  = 100 * time.Millisecond
	statsEvery = time.Second
)

// Options configures a Follower. The zero value of every field is usable and
// documented.
type Options struct {
	// Stream is the stream key events are read from. "" means
	// event.DefaultStream.
	Stream string
	// Partition and Partitions: Stream is partition Partition of
	// event.Streams(base, Partitions) (the emitters' Partitions). The
	// collector of each partition checkpoints only its partition's holders.
	// Zero values: one stream.
	Partition, Partitions int
	// Replica names this collector among the replicas reading the stream:
	// each replica reads every event through its own consumer group
	// (replicaGroupPrefix + Replica) and rebuilds its picture at start (see
	// rebuild.go). "" means the hostname. Two live processes with the same
	// name would split the stream: the second one refuses to read (its
	// health says why) until the first one is gone.
	Replica string
	// Group, when set, replaces the replica's own group by a group shared
	// with other collectors: they split the stream between them (each sees
	// part of every lock's events) and take over each other's
	// unacknowledged entries; nothing is rebuilt at start. Collectors that
	// share a group are logged as an error.
	Group string
	// Consumer names this collector within a shared Group. "" means
	// "<hostname>-<pid>" (with a shared Group) or the replica name. A
	// restarted collector with the same name first re-reads its own
	// unacknowledged entries.
	Consumer string
	// Count is the number of entries asked for per XREADGROUP. 0 means 64;
	// an entry written by the Go emitter packs up to
	// lock.EmitterOptions.BatchSize events (2048 by default).
	Count int
	// Block is how long one XREADGROUP waits for new entries. 0 means
	// 500ms. New entries are delivered the moment they are written whatever
	// Block is; Block bounds how long Run takes to return after its context
	// is cancelled.
	Block time.Duration
	// ClaimMinIdle is how long another consumer's entry must have been
	// pending (read, never acknowledged: that collector died) before this
	// one claims it with XAUTOCLAIM, at start and every ClaimMinIdle/2.
	// 0 means 30s.
	ClaimMinIdle time.Duration
	// Backfill is how much of the stream's past a replica replays at start
	// (by the Redis server's clock), and where a shared Group that does not
	// exist yet is created: events written shortly before the collector
	// started are counted while a long history is not replayed. 0 means 5m;
	// negative means only events written from now on.
	Backfill time.Duration
	// Watch are the keys of other libraries' locks to follow passively
	// through keyspace notifications: Redis glob patterns, each followed by
	// "=ttl" or "=any" to take more values for locks than the known
	// libraries' tokens (see ParseWatch and watch_rule.go), e.g. "lock:*"
	// or "jobs:*=ttl". nil means none; the "expired" notifications that
	// confirm expirations are followed anyway.
	Watch []string
	// WatchNoTTL gives the Watch patterns without a kind the kind "any":
	// any string value is a lock, with or without a TTL. Deprecated: write
	// "PATTERN=any"; a known library's token is a lock without a TTL
	// anyway.
	WatchNoTTL bool
	// Logger receives the collector's logs. nil means slog.Default().
	Logger *slog.Logger
	// Now stamps the events the passive watcher synthesizes. nil means
	// time.Now; pass the Aggregator's clock when it has one.
	Now func() time.Time
}

func (o Options) withDefaults() Options {
	if o.Stream == "" {
		o.Stream = event.DefaultStream
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "collector"
	}
	if o.Replica == "" {
		o.Replica = host
	}
	if o.Group == "" {
		o.Group = replicaGroupPrefix + o.Replica
		if o.Consumer == "" {
			o.Consumer = o.Replica
		}
	}
	if o.Consumer == "" {
		o.Consumer = host + "-" + strconv.Itoa(os.Getpid())
	}
	if o.Count <= 0 {
		o.Count = DefaultCount
	}
	if o.Block <= 0 {
		o.Block = DefaultBlock
	}
	if o.ClaimMinIdle <= 0 {
		o.ClaimMinIdle = DefaultClaimMinIdle
	}
	if o.Backfill == 0 {
		o.Backfill = DefaultBackfill
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Follower feeds the aggregation state from Redis: the event stream through a
// consumer group, "expired" keyspace notifications, and the passive watch of
// other libraries' locks.
type Follower struct {
	rdb   redis.UniversalClient
	agg   *state.Aggregator
	opt   Options
	log   *slog.Logger
	rules []watchRule // Options.Watch parsed

	running     atomic.Bool
	noInfoShown atomic.Bool
	noScript    atomic.Bool   // EVALSHA refused: reads sized by count only (read.go)
	staleAfter  time.Duration // staleConsumerAfter; tests shorten it
	ckptEvery   time.Duration // checkpointEvery; tests shorten it
	ckptMinAge  time.Duration // checkpointMinAge; tests shorten it
	gaps        gapTracker

	// Written by the applier, read by the fetcher when it must recreate
	// the group.
	mu          sync.Mutex
	lastApplied string // highest entry ID applied (acked or not)

	// replica: the group is this replica's own (Options.Group was ""): the
	// picture is rebuilt at start, then replayed is closed and the ticker,
	// the watcher and the checkpoint writer start.
	replica  bool
	instance string // random id of this process in the presence key
	rebuilt  bool   // fetcher only
	// nextRead is how many entries the next read asks for when the
	// script is refused (fetcher only): see count.
	nextRead int
	// sharedWarned: the shared group's other readers were logged (fetcher only).
	sharedWarned bool
	replayed     chan struct{}

	groupGen atomic.Uint64              // bumped whenever this collector (re)creates the group
	fresh    atomic.Pointer[freshReads] // new entries read since the last poll (failover.go)
	entries  atomic.Int64               // entries applied, malformed included
	applied  atomic.Int64               // events passed to Aggregator.Apply from the stream
	synced   atomic.Int64               // watcher (re)subscriptions completed with their rescan
}

// New returns a Follower reading from rdb into agg. opt may be nil.
func New(rdb redis.UniversalClient, agg *state.Aggregator, opt *Options) *Follower {
	var o Options
	if opt != nil {
		o = *opt
	}
	replica := o.Group == ""
	o = o.withDefaults()
	c := &Follower{
		rdb:   rdb,
		agg:   agg,
		opt:   o,
		log:   o.Logger.With("component", "collector", "stream", o.Stream, "group", o.Group),
		rules: watchRules(o.Watch, o.WatchNoTTL),

		replica:    replica,
		instance:   rand.Text(),
		replayed:   make(chan struct{}),
		staleAfter: staleConsumerAfter,
		ckptEvery:  checkpointEvery,
		ckptMinAge: checkpointMinAge,
	}
	if !replica {
		close(c.replayed)
	}
	// Not ready until Run has read the group: a server that starts serving
	// before Run begins must not report ready in between.
	agg.SetPartitionHealth(o.Partition, errStarting)
	return c
}

var (
	errStarting = errors.New("collector: starting, consumer group not ready yet")
	errStopped  = errors.New("collector: stopped")
)

// Run ingests until ctx is cancelled, then acknowledges what it applied and
// returns nil. Redis errors never end Run: it reports them through the
// Aggregator's health, keeps the last state and reconnects with backoff.
func (c *Follower) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return errors.New("collector: Run called while already running")
	}
	defer c.running.Store(false)
	c.agg.SetPartitionHealth(c.opt.Partition, errStarting)
	defer c.agg.SetPartitionHealth(c.opt.Partition, errStopped)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	spawn := func(f func(context.Context)) {
		wg.Add(1)
		go func() { defer wg.Done(); f(ctx) }()
	}
	// What the ticker and the watcher apply follows the collector's clock:
	// they start once the replay at start (if any) is done.
	afterReplay := func(f func(context.Context)) func(context.Context) {
		return func(ctx context.Context) {
			select {
			case <-ctx.Done():
			case <-c.replayed:
				f(ctx)
			}
		}
	}
	// One tick for the state, however many partitions feed it: the
	// first partition's follower ticks.
	if c.opt.Partition == 0 {
		spawn(afterReplay(func(ctx context.Context) { every(ctx, tickEvery, c.agg.Tick) }))
	}
	// Errors of the stats poll are the fetcher's to report.
	spawn(func(ctx context.Context) { every(ctx, statsEvery, func() { c.inspect(ctx) }) })
	spawn(afterReplay(c.watch))
	if c.replica {
		spawn(afterReplay(c.writeCheckpoints))
		spawn(afterReplay(c.keepPresence))
	}
	c.ingest(ctx)
	cancel()
	wg.Wait()
	return nil
}

// every calls fn every d until ctx ends.
func every(ctx context.Context, d time.Duration, fn func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
		}
	}
}

// backoff spaces out retries against an unreachable Redis: doubling from
// 50ms, capped at 2s, with jitter so replicas do not retry in step.
type backoff struct{ cur time.Duration }

const (
	backoffMin = 50 * time.Millisecond
	backoffMax = 2 * time.Second
)

func (b *backoff) next() time.Duration {
	switch {
	case b.cur == 0:
		b.cur = backoffMin
	case b.cur < backoffMax:
		b.cur = min(2*b.cur, backoffMax)
	}
	return b.cur/2 + mrand.N(b.cur/2+1)
}

func (b *backoff) reset() { b.cur = 0 }

// streamID is a parsed stream entry ID, ordered like Redis orders them.
type streamID struct{ ms, seq uint64 }

func parseID(s string) (streamID, bool) {
	msPart, seqPart, ok := cutByte(s, '-')
	ms, err1 := strconv.ParseUint(msPart, 10, 64)
	if !ok {
		return streamID{ms: ms}, err1 == nil
	}
	seq, err2 := strconv.ParseUint(seqPart, 10, 64)
	return streamID{ms, seq}, err1 == nil && err2 == nil
}

func cutByte(s string, b byte) (before, after string, found bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == b {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

func (a streamID) less(b streamID) bool {
	return a.ms < b.ms || a.ms == b.ms && a.seq < b.seq
}

func (a streamID) String() string { return fmt.Sprintf("%d-%d", a.ms, a.seq) }

// idLess reports whether stream ID a sorts before b; unparsable IDs sort first.
func idLess(a, b string) bool {
	x, okA := parseID(a)
	y, okB := parseID(b)
	if !okA || !okB {
		return !okA && okB
	}
	return x.less(y)
}
