package collector

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/collector/state"
)

// The lock-order graph across restarts: the state derives the edges from
// the acquired events (collector/state/lockorder.go), but the stream keeps
// only minutes of them and an edge lives for the window (24 h). A
// LockOrderStore keeps the edges in one Redis hash shared by every replica
// of the stream, as the incident history is kept (incidents.go): each
// replica writes what it counts, a script merges a record into the one
// stored under its id (the larger count, owners added, earliest first and
// latest last sighting), and a replica reads the hash at start
// (state.RestoreLockOrder) before it replays the stream.
//
// Bounds: at most state.MaxOrderEdges records plus a quarter before a trim,
// each under lockOrderRecordMax bytes (the state cuts its strings: some 6
// KiB at worst), so under 8 MiB; a record last seen longer ago than the
// window is dropped at the next trim and never restored.

const (
	lockOrderFlushEvery = time.Second
	lockOrderPerCall    = 100      // records per script call
	lockOrderRecordMax  = 16 << 10 // bytes: a longer stored record is skipped when read
	lockOrderScanCount  = 256      // HSCAN page
	lockOrderReadMax    = 4 << 10  // records read at start, at most
	lockOrderLoadFor    = 5 * time.Second
)

//go:embed lockorder.lua
var lockOrderLua string

var lockOrderScript = redis.NewScript(lockOrderLua)

// LockOrderOptions configure a LockOrderStore. The zero value is usable.
type LockOrderOptions struct {
	// Window is how long an edge is kept after it was last seen (the
	// state's Config.LockOrderWindow). 0 means state.DefaultLockOrderWindow.
	Window time.Duration
	// Logger receives the store's logs. nil means slog.Default().
	Logger *slog.Logger
	// Now is the clock the window is measured by. nil means time.Now.
	Now func() time.Time
}

// LockOrderStore keeps the lock-order edges the state counts in Redis. It
// is the state's Config.LockOrder: LockOrderEdges only queues; Run writes
// the queue every second, merged by id. Load reads the graph back.
type LockOrderStore struct {
	rdb redis.UniversalClient
	key string
	opt LockOrderOptions
	log *slog.Logger

	mu      sync.Mutex
	pending map[string]state.OrderEdge
}

var _ state.LockOrderSink = (*LockOrderStore)(nil)

// NewLockOrderStore returns the store of stream's lock-order graph.
func NewLockOrderStore(rdb redis.UniversalClient, stream string, opt *LockOrderOptions) *LockOrderStore {
	var o LockOrderOptions
	if opt != nil {
		o = *opt
	}
	if o.Window <= 0 {
		o.Window = state.DefaultLockOrderWindow
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &LockOrderStore{rdb: rdb, key: LockOrderKey(stream), opt: o,
		log: o.Logger.With("component", "lockorder", "key", LockOrderKey(stream)), pending: make(map[string]state.OrderEdge)}
}

// LockOrderEdges queues edges for the next write, replacing what is queued
// under their ids (the state hands an edge's whole current figures). The
// queue holds at most one entry per edge the state keeps.
func (s *LockOrderStore) LockOrderEdges(es []state.OrderEdge) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range es {
		s.pending[edgeID(e.From, e.To)] = e
	}
}

// edgeID names an edge unambiguously whatever bytes its classes hold.
func edgeID(from, to string) string { return strconv.Itoa(len(from)) + ":" + from + to }

// Run writes the queued edges every second until ctx ends, then once more.
// Redis errors are logged and the edges kept for the next write.
func (s *LockOrderStore) Run(ctx context.Context) error {
	t := time.NewTicker(lockOrderFlushEvery)
	defer t.Stop()
	failed := false
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			err := s.Flush(fctx)
			cancel()
			if err != nil {
				s.log.Warn("lock order: last write failed", "err", err)
			}
			return nil
		case <-t.C:
		}
		err := s.Flush(ctx)
		switch {
		case err != nil && !failed && ctx.Err() == nil:
			s.log.Warn("lock order: cannot write; keeping the edges to retry", "fix", remedy(err, "+evalsha +eval +hget +hset +hlen +hgetall +hdel +pexpire +hscan on the lock-order key"), "err", err)
			failed = true
		case err == nil && failed:
			s.log.Info("lock order: writing again")
			failed = false
		}
	}
}

// Flush writes the queued edges now. Those it could not write are queued
// again, under what was queued since.
func (s *LockOrderStore) Flush(ctx context.Context) error {
	s.mu.Lock()
	batch := s.pending
	s.pending = make(map[string]state.OrderEdge, len(batch))
	s.mu.Unlock()
	if len(batch) == 0 {
		return nil
	}
	ids := make([]string, 0, len(batch))
	for id := range batch {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	now := s.opt.Now()
	for len(ids) > 0 {
		part := ids[:min(len(ids), lockOrderPerCall)]
		args := []any{state.MaxOrderEdges, now.Add(-s.opt.Window).UnixMilli(), s.opt.Window.Milliseconds(), state.MaxOrderOwners}
		for _, id := range part {
			b, err := json.Marshal(orderRecordOf(batch[id]))
			if err != nil {
				return err
			}
			args = append(args, id, b)
		}
		if err := lockOrderScript.Run(ctx, s.rdb, []string{s.key}, args...).Err(); err != nil {
			s.requeue(batch, ids)
			return err
		}
		ids = ids[len(part):]
	}
	return nil
}

func (s *LockOrderStore) requeue(batch map[string]state.OrderEdge, ids []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		if _, newer := s.pending[id]; !newer {
			s.pending[id] = batch[id]
		}
	}
}

// Load reads the stored graph: the edges last seen within the window, at
// most lockOrderReadMax records. Records that cannot be read (or are
// longer than any the store writes) are skipped and logged, never an
// error.
func (s *LockOrderStore) Load(ctx context.Context) ([]state.OrderEdge, error) {
	cutoff := s.opt.Now().Add(-s.opt.Window)
	var out []state.OrderEdge
	bad, read := 0, 0
	var cursor uint64
	for {
		kv, next, err := s.rdb.HScan(ctx, s.key, cursor, "", lockOrderScanCount).Result()
		if err != nil {
			return out, err
		}
		for i := 0; i+1 < len(kv) && read < lockOrderReadMax; i += 2 {
			read++
			e, err := parseOrderRecord(kv[i], kv[i+1])
			switch {
			case err != nil:
				bad++
			case e.LastSeen.Before(cutoff):
			default:
				out = append(out, e)
			}
		}
		cursor = next
		if cursor == 0 || read >= lockOrderReadMax {
			break
		}
	}
	if bad > 0 {
		s.log.Warn("lock order: records that could not be read were skipped", "count", bad)
	}
	return out, nil
}

// Restore loads the stored graph into agg, within lockOrderLoadFor: a
// replica that cannot read it starts with the edges of the replayed stream
// alone, and says so.
func (s *LockOrderStore) Restore(ctx context.Context, agg *state.Aggregator) {
	lctx, cancel := context.WithTimeout(ctx, lockOrderLoadFor)
	defer cancel()
	edges, err := s.Load(lctx)
	if err != nil && !errors.Is(err, redis.Nil) {
		s.log.Warn("lock order: cannot read the stored graph; starting from the stream's events", "fix", remedy(err, "+hscan on the lock-order key"), "err", err)
	}
	agg.RestoreLockOrder(edges)
}

// orderRecord is an edge as the graph stores it. Classes, keys and owners
// are arbitrary bytes: JSON carries them base64-encoded, which the script
// compares as they are. Times are unix milliseconds.
type orderRecord struct {
	From    []byte   `json:"from"`
	To      []byte   `json:"to"`
	Count   int64    `json:"count"`
	Owners  [][]byte `json:"owners,omitempty"`
	More    bool     `json:"more,omitempty"`
	First   int64    `json:"first"`
	Last    int64    `json:"last"`
	FromKey []byte   `json:"from_key,omitempty"`
	ToKey   []byte   `json:"to_key,omitempty"`
}

func orderRecordOf(e state.OrderEdge) orderRecord {
	r := orderRecord{From: []byte(e.From), To: []byte(e.To), Count: e.Count, More: e.MoreOwners,
		First: e.FirstSeen.UnixMilli(), Last: e.LastSeen.UnixMilli(), FromKey: []byte(e.FromKey), ToKey: []byte(e.ToKey)}
	for _, o := range e.Owners {
		r.Owners = append(r.Owners, []byte(o))
	}
	return r
}

// storedOrderRecord is orderRecord as read back: Lua writes its numbers
// as floats.
type storedOrderRecord struct {
	orderRecord
	Count float64 `json:"count"`
	First float64 `json:"first"`
	Last  float64 `json:"last"`
}

func parseOrderRecord(id, v string) (state.OrderEdge, error) {
	if len(v) > lockOrderRecordMax {
		return state.OrderEdge{}, fmt.Errorf("lock-order record %q: %d bytes", id, len(v))
	}
	var r storedOrderRecord
	if err := json.Unmarshal([]byte(v), &r); err != nil {
		return state.OrderEdge{}, fmt.Errorf("lock-order record %q: %w", id, err)
	}
	if len(r.From) == 0 || len(r.To) == 0 || r.Last <= 0 || r.Count < 1 || len(r.Owners) > state.MaxOrderOwners {
		return state.OrderEdge{}, errors.New("lock-order record " + strconv.Quote(id) + ": no classes, count or last sighting")
	}
	e := state.OrderEdge{From: string(r.From), To: string(r.To), Count: int64(r.Count), MoreOwners: r.More,
		FirstSeen: time.UnixMilli(int64(r.First)), LastSeen: time.UnixMilli(int64(r.Last)),
		FromKey: string(r.FromKey), ToKey: string(r.ToKey)}
	for _, o := range r.Owners {
		e.Owners = append(e.Owners, string(o))
	}
	return e, nil
}
