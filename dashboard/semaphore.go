package dashboard

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/internal/lockjson"
	"github.com/lockscope/lockscope/internal/redisson"
)

// Redisson semaphores on the key page and in /api/v1/locks/{key}. A
// semaphore is no lock: no one owner holds it, no event stream tells of it.
// Under a watch rule "PATTERN=semaphore" (Options.Semaphore) its key page
// and JSON read it live from Redis: the permits available, the permits in
// use when Redis knows them (an expirable semaphore's set of permits; an
// RSemaphore keeps no total), each expirable permit and when it expires,
// and the clients waiting on its channel.

// SemaphoreReader reads key as a Redisson semaphore: nil and no error when
// key is not one (no rule says so, or it holds no counter).
type SemaphoreReader func(ctx context.Context, key string) (*redisson.Semaphore, error)

// semaphore reads key as a semaphore, if a rule says it is one.
func (s *server) semaphore(ctx context.Context, key string) (*redisson.Semaphore, error) {
	if s.opt.Semaphore == nil {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, inspectTimeout)
	defer cancel()
	sem, err := s.opt.Semaphore(ctx, key)
	if errors.Is(err, redisson.ErrNotSemaphore) {
		return nil, nil
	}
	return sem, err
}

// semaphoreView is the key page's semaphore card.
type semaphoreView struct {
	Kind      string
	Available string
	Used      string // "not known" for an RSemaphore
	Waiters   string
	TTL       string
	Permits   []permitRow
}

type permitRow struct{ ID, Expires string }

func newSemaphoreView(sem *redisson.Semaphore, now time.Time) *semaphoreView {
	v := &semaphoreView{Kind: sem.Kind(), Available: strconv.FormatInt(sem.Available, 10), Used: "not known",
		Waiters: strconv.FormatInt(sem.Waiters, 10), TTL: "none"}
	if sem.UsedKnown {
		v.Used = strconv.FormatInt(sem.Used, 10)
	}
	if sem.TTL > 0 {
		v.TTL = fmtDuration(sem.TTL.Truncate(time.Second))
	}
	for _, p := range sem.Permits {
		row := permitRow{ID: p.ID, Expires: "no lease"}
		if !p.Expires.IsZero() {
			row.Expires = "in " + fmtDuration(p.Expires.Sub(now).Truncate(time.Second))
		}
		v.Permits = append(v.Permits, row)
	}
	return v
}

// apiSemaphore is a semaphore in /api/v1/locks/{key}.
type apiSemaphore struct {
	Kind             string      `json:"kind"` // "semaphore" or "permit-expirable semaphore"
	PermitsAvailable int64       `json:"permits_available"`
	PermitsUsed      *int64      `json:"permits_used"` // null: not known (an RSemaphore keeps no total)
	Permits          []apiPermit `json:"permits"`      // an expirable semaphore's permits in use
	Waiters          int64       `json:"waiters"`      // clients subscribed to its channel, waiting for a permit
	TTL              float64     `json:"ttl_seconds"`  // 0: none
}

type apiPermit struct {
	ID      string     `json:"id"`
	Expires *time.Time `json:"expires"` // null: no lease
}

func newAPISemaphore(sem *redisson.Semaphore) *apiSemaphore {
	v := &apiSemaphore{Kind: sem.Kind(), PermitsAvailable: sem.Available, Permits: make([]apiPermit, 0, len(sem.Permits)),
		Waiters: sem.Waiters, TTL: seconds(sem.TTL)}
	if sem.UsedKnown {
		n := sem.Used
		v.PermitsUsed = &n
	}
	for _, p := range sem.Permits {
		v.Permits = append(v.Permits, apiPermit{ID: p.ID, Expires: lockjson.Time(p.Expires)})
	}
	return v
}

// semaphorePage is the key page of a key a rule calls a semaphore: what
// the collector saw of it (nothing, usually: no lock event names it) and
// the semaphore as Redis holds it now.
func (s *server) semaphorePage(w http.ResponseWriter, r *http.Request, key string, d state.KeyDetail, known bool, sem *redisson.Semaphore, err error) {
	note := ""
	if err != nil {
		note = "Redis could not be asked: " + err.Error()
	}
	v := s.keyView(r, key, d, known, nil, note)
	v.CanRelease = false // a semaphore is no lock to release
	if sem == nil {
		sem = &redisson.Semaphore{}
	}
	v.Semaphore = newSemaphoreView(sem, s.now())
	if err != nil {
		v.Semaphore.Used, v.Semaphore.Available, v.Semaphore.Waiters = "not known", "not known", "not known"
	}
	s.render(w, r, http.StatusOK, keyPage(v))
}

// semaphoreNoRelease is the answer to a forced release of a semaphore.
const semaphoreNoRelease = "this key is a Redisson semaphore (a --watch PATTERN=semaphore rule): no lock to release; its permits are its callers'"

// isSemaphore reports whether a rule makes key a semaphore that Redis
// holds (or could not be asked about): no forced release deletes it.
func (s *server) isSemaphore(ctx context.Context, key string) bool {
	sem, err := s.semaphore(ctx, key)
	return sem != nil || err != nil
}
