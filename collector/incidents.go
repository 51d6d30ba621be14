package collector

import (
	"cmp"
	"context"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/collector/state"
)

// The incident history: the state derives incidents from the events
// (collector/state/incidents.go); an IncidentStore keeps them in one Redis
// hash shared by every replica of the stream, so that each lists the same
// incidents and a restarted one still has them.
//
// Every replica applies the same events and so derives the same incidents
// under the same deterministic ids: each writes what it derives, and a
// script merges a record into the one stored under its id (keys and owners
// added, earliest start, latest end). No replica is special and none needs
// to be up for the others to keep the history.

// Incident history bounds.
const (
	// DefaultIncidentsMax is how many incidents the history keeps by
	// default: past a quarter more, the least recently active are dropped.
	DefaultIncidentsMax = 1000
	// DefaultIncidentsMaxAge is how long an incident is kept after it was
	// last active (its end, or its start while open).
	DefaultIncidentsMaxAge = 7 * 24 * time.Hour

	incidentsFlushEvery = time.Second
	incidentsPendingMax = 4096 // incidents waiting for the next write, at most (each within incidentRecordMax)
	incidentsPerCall    = 100  // records per script call

	// incidentsFresh is how old a read of the history may be when it is
	// listed: every reader within it shares one HGETALL (see sharedRead).
	incidentsFresh       = time.Second
	incidentsReadTimeout = 5 * time.Second
)

//go:embed incidents.lua
var incidentsLua string

var incidentsScript = redis.NewScript(incidentsLua)

// IncidentOptions configure an IncidentStore. The zero value is usable.
type IncidentOptions struct {
	// Max is how many incidents the history keeps. 0 means
	// DefaultIncidentsMax.
	Max int
	// MaxAge is how long an incident is kept after it was last active. 0
	// means DefaultIncidentsMaxAge.
	MaxAge time.Duration
	// Logger receives the store's logs. nil means slog.Default().
	Logger *slog.Logger
	// Now is the clock the age is measured by. nil means time.Now.
	Now func() time.Time
	// Malformed counts the stored records that are not records (see
	// IncidentStore.List and incidents.lua). nil counts nowhere.
	Malformed state.Counter
}

// IncidentStore keeps the incidents the state derives in Redis. It is the
// state's Config.Incidents: Incident only queues a record; Run writes the
// queue every second, merged by id. List reads the history.
//
// Whatever the events say, the history is bounded: each record to
// incidentRecordMax bytes (incidents_bounds.go), the hash to Max + Max/4
// records; readers share one read a second; a stored value that is not a
// record is skipped, counted and replaced, never fatal.
type IncidentStore struct {
	rdb  redis.UniversalClient
	key  string
	opt  IncidentOptions
	log  *slog.Logger
	read *sharedRead[[]state.Incident]

	mu      sync.Mutex
	pending map[string]state.Incident
	full    bool            // pending reached incidentsPendingMax since the last write (logged once)
	bad     map[string]bool // ids of the values the last read could not parse (each counted once)
}

var _ state.IncidentSink = (*IncidentStore)(nil)

// NewIncidentStore returns the store of stream's incident history.
func NewIncidentStore(rdb redis.UniversalClient, stream string, opt *IncidentOptions) *IncidentStore {
	var o IncidentOptions
	if opt != nil {
		o = *opt
	}
	if o.Max <= 0 {
		o.Max = DefaultIncidentsMax
	}
	if o.MaxAge <= 0 {
		o.MaxAge = DefaultIncidentsMaxAge
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	s := &IncidentStore{rdb: rdb, key: IncidentsKey(stream), opt: o,
		log: o.Logger.With("component", "incidents", "key", IncidentsKey(stream)), pending: make(map[string]state.Incident)}
	s.read = newSharedRead(s.readAll, incidentsFresh, incidentsReadTimeout, o.Now)
	return s
}

// Incident queues a record for the next write, merged with what is queued
// under its id. It never blocks on Redis (the state calls it with its locks
// held); past incidentsPendingMax queued incidents new ones are dropped
// (the other replicas still write them).
func (s *IncidentStore) Incident(in state.Incident) {
	in = clipIncident(in)
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.pending[in.ID]; ok {
		s.pending[in.ID] = clipIncident(state.Merge(p, in))
		return
	}
	if len(s.pending) >= incidentsPendingMax {
		if !s.full {
			s.full = true
			s.log.Warn("incident history: too many incidents waiting to be written; dropping new ones until Redis takes them", "max", incidentsPendingMax)
		}
		return
	}
	s.pending[in.ID] = in
}

// Run writes the queued incidents every second until ctx ends, then once
// more. Redis errors are logged and the records kept for the next write.
func (s *IncidentStore) Run(ctx context.Context) error {
	t := time.NewTicker(incidentsFlushEvery)
	defer t.Stop()
	failed := false
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			err := s.Flush(fctx)
			cancel()
			if err != nil {
				s.log.Warn("incident history: last write failed", "err", err)
			}
			return nil
		case <-t.C:
		}
		err := s.Flush(ctx)
		switch {
		case err != nil && !failed && ctx.Err() == nil:
			s.log.Warn("incident history: cannot write; keeping the incidents to retry", "fix", remedy(err, "+evalsha +eval +hget +hset +hlen +hgetall +hdel +pexpire on the incidents key"), "err", err)
			failed = true
		case err == nil && failed:
			s.log.Info("incident history: writing again")
			failed = false
		}
	}
}

// Flush writes the queued incidents now. Those it could not write are
// queued again.
func (s *IncidentStore) Flush(ctx context.Context) error {
	s.mu.Lock()
	batch := s.pending
	s.pending = make(map[string]state.Incident, len(batch))
	s.full = false
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
	defer s.read.invalidate()
	for len(ids) > 0 {
		part := ids[:min(len(ids), incidentsPerCall)]
		args := []any{s.opt.Max, now.Add(-s.opt.MaxAge).UnixMilli(), s.opt.MaxAge.Milliseconds(),
			state.MaxIncidentKeys, state.MaxIncidentOwners, incidentKeysBytes, incidentOwnerBytes,
			base64.StdEncoding.EncodedLen(incidentDetailMax), incidentWordMax, incidentLeasesBytes}
		for _, id := range part {
			b, err := json.Marshal(recordOf(batch[id]))
			if err != nil {
				return err
			}
			args = append(args, id, b)
		}
		res, err := incidentsScript.Run(ctx, s.rdb, []string{s.key}, args...).Int64Slice()
		if err != nil {
			s.requeue(batch, ids)
			return err
		}
		if len(res) == 2 && res[1] > 0 {
			s.log.Warn("incident history: stored values that were not incident records were replaced or dropped", "count", res[1])
			if s.opt.Malformed != nil {
				s.opt.Malformed.Add(float64(res[1]))
			}
		}
		ids = ids[len(part):]
	}
	return nil
}

// requeue puts the incidents of ids back in the queue, under what was
// queued since.
func (s *IncidentStore) requeue(batch map[string]state.Incident, ids []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		in := batch[id]
		if p, ok := s.pending[id]; ok {
			s.pending[id] = state.Merge(in, p)
		} else if len(s.pending) < incidentsPendingMax {
			s.pending[id] = in
		}
	}
}

// List returns up to limit incidents of the history, the most recently
// started first (open ones among them as they started), leaving out those
// last active longer than MaxAge ago. Every List within incidentsFresh of
// a read shares it (and its records: the caller must not modify them).
func (s *IncidentStore) List(ctx context.Context, limit int) ([]state.Incident, error) {
	all, err := s.read.get(ctx)
	if err != nil {
		return nil, err
	}
	if limit > 0 && len(all) > limit {
		all = all[:limit:limit]
	}
	return all, nil
}

// readAll reads and sorts the whole history: the one read that every List
// within incidentsFresh shares. A value that is not a record is skipped
// and counted once per id.
func (s *IncidentStore) readAll(ctx context.Context) ([]state.Incident, error) {
	all, err := s.rdb.HGetAll(ctx, s.key).Result()
	if err != nil {
		return nil, err
	}
	cutoff := s.opt.Now().Add(-s.opt.MaxAge)
	out := make([]state.Incident, 0, len(all))
	bad := make(map[string]bool)
	for id, v := range all {
		in, err := parseRecord(id, v)
		if err != nil {
			bad[id] = true
			continue
		}
		if in.Start.Before(cutoff) && in.End.Before(cutoff) {
			continue
		}
		out = append(out, clipIncident(in))
	}
	s.mu.Lock()
	fresh := 0
	for id := range bad {
		if !s.bad[id] {
			fresh++
		}
	}
	s.bad = bad // only the ids still stored: bounded by the hash
	s.mu.Unlock()
	if fresh > 0 {
		s.log.Warn("incident history: stored values that are not incident records were skipped", "count", fresh, "skipped_now", len(bad))
		if s.opt.Malformed != nil {
			s.opt.Malformed.Add(float64(fresh))
		}
	}
	slices.SortFunc(out, func(a, b state.Incident) int {
		if c := b.Start.Compare(a.Start); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	return out, nil
}

// record is an incident as the history stores it. Keys, owners and the
// detail are arbitrary bytes: JSON carries them base64-encoded, which the
// script compares as they are. Times are unix milliseconds (exact in Lua's
// numbers); end 0 while open.
type record struct {
	Kind    string   `json:"kind"`
	Keys    [][]byte `json:"keys,omitempty"`
	Owners  [][]byte `json:"owners,omitempty"`
	Start   int64    `json:"start"`
	End     int64    `json:"end"`
	EndedBy string   `json:"ended_by,omitempty"`
	Detail  []byte   `json:"detail,omitempty"`
	Count   int      `json:"count,omitempty"`
	// An overlap's (state.IncidentOverlap).
	Cause    string   `json:"cause,omitempty"`
	Leases   [][]byte `json:"leases,omitempty"`
	Renewals int      `json:"renewals_refused,omitempty"`
	Writes   int      `json:"writes_refused,omitempty"`
}

func recordOf(in state.Incident) record {
	r := record{Kind: string(in.Kind), EndedBy: in.EndedBy, Count: in.Count, Start: in.Start.UnixMilli()}
	if !in.End.IsZero() {
		r.End = in.End.UnixMilli()
	}
	if in.Detail != "" {
		r.Detail = []byte(in.Detail)
	}
	for _, k := range in.Keys {
		r.Keys = append(r.Keys, []byte(k))
	}
	for _, o := range in.Owners {
		r.Owners = append(r.Owners, []byte(o))
	}
	r.Cause, r.Renewals, r.Writes = in.Cause, in.RenewalsRefused, in.WritesRefused
	for _, l := range in.Leases {
		r.Leases = append(r.Leases, []byte(l))
	}
	return r
}

// storedRecord is record as read back: Lua writes its numbers as floats.
type storedRecord struct {
	record
	Start    float64 `json:"start"`
	End      float64 `json:"end"`
	Count    float64 `json:"count"`
	Renewals float64 `json:"renewals_refused"`
	Writes   float64 `json:"writes_refused"`
}

func parseRecord(id, v string) (state.Incident, error) {
	var r storedRecord
	if err := json.Unmarshal([]byte(v), &r); err != nil {
		return state.Incident{}, fmt.Errorf("incident %q: %w", id, err)
	}
	if r.Kind == "" || r.Start <= 0 {
		return state.Incident{}, errors.New("incident " + id + ": no kind or start")
	}
	in := state.Incident{ID: id, Kind: state.IncidentKind(r.Kind), Start: time.UnixMilli(int64(r.Start)),
		EndedBy: r.EndedBy, Detail: string(r.Detail), Count: int(r.Count)}
	if r.End > 0 {
		in.End = time.UnixMilli(int64(r.End))
	}
	for _, k := range r.Keys {
		in.Keys = append(in.Keys, string(k))
	}
	in.Cause, in.RenewalsRefused, in.WritesRefused = r.Cause, int(r.Renewals), int(r.Writes)
	for _, l := range r.Leases {
		in.Leases = append(in.Leases, string(l))
	}
	for _, o := range r.Owners {
		in.Owners = append(in.Owners, string(o))
	}
	return in, nil
}
