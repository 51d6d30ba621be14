package dashboard

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/lockscope/lockscope/internal/keytext"
	"github.com/lockscope/lockscope/lock"
)

// The Redis round trips pages make, all through a Releaser: who holds a key
// now (the key page, its JSON, the release confirmation) and the forced
// release itself, with its audit log; and a Redisson semaphore's permits,
// through Options.Semaphore (semaphore.go). Everything else a page shows
// comes from the collector's state in memory.

// Releaser inspects and force-releases locks; *lock.Client implements it.
type Releaser interface {
	// Inspect returns the current holder of key (lock.ErrNotHeld if none).
	Inspect(ctx context.Context, key string) (*lock.Holder, error)
	// ForceRelease deletes key only if its value's fingerprint still matches;
	// else lock.ErrOwnerChanged (or lock.ErrNotHeld) and nothing changes.
	ForceRelease(ctx context.Context, key, fingerprint, by, reason string) (*lock.Holder, error)
}

var _ Releaser = (*lock.Client)(nil)

// inspectTimeout bounds the one Redis round trip a key page makes.
const inspectTimeout = 2 * time.Second

// inspect asks Redis for key's holder: nil and no error when it is not held
// (or there is no lock client to ask).
func (s *server) inspect(ctx context.Context, key string) (*lock.Holder, error) {
	if s.rel == nil {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, inspectTimeout)
	defer cancel()
	h, err := s.rel.Inspect(ctx, key)
	if errors.Is(err, lock.ErrNotHeld) {
		return nil, nil
	}
	return h, err
}

// viewerInspect is inspect as the viewer of r may see it: Redis is a
// store of secrets as well as of locks, and a page must not make it an
// oracle (the SHA-1 of a 6-digit one-time password gives the password
// back in a fraction of a second).
//
//   - An operator sees any key's holder as Redis has it, fingerprint
//     included: it is what a forced release quotes.
//   - Anyone else is shown nothing Redis holds under a key that no lock
//     event names (known false): Redis is not even asked, so an answer
//     does not tell whether the key exists.
//   - For a key the collector tracks, anyone else sees the holder without
//     its fingerprint; and a foreign value of no known library's shape
//     (Holder.Ambiguous: a constant, a host name, or no lock at all
//     under a key a stream writer named) is not shown at all: hidden
//     reports that Redis holds one, which operators see.
func (s *server) viewerInspect(r *http.Request, key string, known bool) (h *lock.Holder, hidden bool, err error) {
	if operatorFrom(r.Context()) != "" {
		h, err = s.inspect(r.Context(), key)
		return h, false, err
	}
	if !known {
		return nil, false, nil
	}
	h, err = s.inspect(r.Context(), key)
	if h == nil {
		return nil, false, err
	}
	if h.Foreign && h.Ambiguous {
		return nil, true, nil
	}
	c := *h
	c.Fingerprint, c.Value = "", ""
	return &c, false, nil
}

// hiddenNote says why a viewer sees no holder that Redis has.
const hiddenNote = "Redis holds a value of no known lock library's shape under this key: operators see it."

// untrackedNote ends the not-found answer an anonymous viewer gets for a
// key no lock event names, whether or not Redis holds it.
const untrackedNote = "what Redis holds under a key no lock event names is shown to operators only"

// releaseTimeout bounds the Redis work of one release request.
const releaseTimeout = 5 * time.Second

// releaseOutcome is the result of one ForceRelease call.
type releaseOutcome struct {
	status   int
	kind     string       // "released", "owner-changed", "not-held", "error"
	previous *lock.Holder // released holder
	current  *lock.Holder // holder now, after an owner change
	err      error
}

func (s *server) forceRelease(ctx context.Context, key, operator string, req releaseRequest) releaseOutcome {
	ctx, cancel := context.WithTimeout(ctx, releaseTimeout)
	defer cancel()
	prev, err := s.rel.ForceRelease(ctx, key, req.Fingerprint, operator, req.Reason)
	switch {
	case err == nil:
		attrs := append(append([]any{"by", operator}, keytext.LogAttrs("key", key)...), "reason", req.Reason)
		if prev != nil {
			attrs = append(append(attrs, keytext.LogAttrs("owner", prev.Owner)...), "lease", prev.Lease, "fence", prev.Fence)
			if !prev.Since.IsZero() {
				attrs = append(attrs, "held", s.now().Sub(prev.Since).Round(time.Millisecond))
			}
		}
		s.log.Info("lockscope: forced release", attrs...)
		return releaseOutcome{status: http.StatusOK, kind: "released", previous: prev}
	case errors.Is(err, lock.ErrOwnerChanged):
		s.log.Warn("lockscope: forced release refused, owner changed", append(append([]any{"by", operator}, keytext.LogAttrs("key", key)...), "fingerprint", req.Fingerprint)...)
		cur := prev // ForceRelease answers the holder it found instead
		if cur == nil {
			cur, _ = s.inspect(ctx, key)
		}
		return releaseOutcome{status: http.StatusConflict, kind: "owner-changed", current: cur, err: err}
	case errors.Is(err, lock.ErrAmbiguous):
		return releaseOutcome{status: http.StatusConflict, kind: "ambiguous", current: prev, err: err}
	case errors.Is(err, lock.ErrNotHeld):
		return releaseOutcome{status: http.StatusNotFound, kind: "not-held", err: err}
	default:
		s.log.Error("lockscope: forced release failed", append(append([]any{"by", operator}, keytext.LogAttrs("key", key)...), "err", err)...)
		return releaseOutcome{status: http.StatusBadGateway, kind: "error", err: err}
	}
}
