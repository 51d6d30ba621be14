package lock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"slices"
	"time"
)

// Held leases: what a caller holds while it asks for another lock. A
// waiting event lists them (the edges of the collector's wait-for graph, by
// which it finds deadlocks), and so does an acquired event (the edges of the
// lock-order graph). The lock package finds its own leases in a context
// (Lease.Context, Do); an adapter of another library (extra/) adds its holds
// with WithHeld, so that a caller holding a redsync mutex and asking lockscope
// for a lock, or the other way round, is seen too.

// MaxHeldLeases bounds the leases one event lists: a caller nested deeper
// than this is rare, and the event stays small.
const MaxHeldLeases = 16

type heldKey struct{}

// heldNode is one hold WithHeld added to a context.
type heldNode struct {
	lease string
	held  func() bool
	outer *heldNode
}

// WithHeld returns a context carrying lease (a hold of another library's
// lock, by its public lease id) for as long as held reports true, in
// addition to the leases ctx carries.
func WithHeld(ctx context.Context, lease string, held func() bool) context.Context {
	outer, _ := ctx.Value(heldKey{}).(*heldNode)
	return context.WithValue(ctx, heldKey{}, &heldNode{lease: lease, held: held, outer: outer})
}

// HeldLeases returns the leases ctx carries that still hold their lock, at
// most MaxHeldLeases and each once (a context derived twice from one hold
// carries it twice): those added with WithHeld, innermost first, then this
// package's (Lease.Context, Do), innermost first. A context that carries
// none costs two lookups and no allocation.
func HeldLeases(ctx context.Context) []string {
	var out []string
	for n, _ := ctx.Value(heldKey{}).(*heldNode); n != nil && len(out) < MaxHeldLeases; n = n.outer {
		if !slices.Contains(out, n.lease) && n.held() {
			out = append(out, n.lease)
		}
	}
	for l, _ := FromContext(ctx); l != nil && len(out) < MaxHeldLeases; l = l.outer {
		l.mu.Lock()
		held := l.state == stateHeld
		l.mu.Unlock()
		if held && !slices.Contains(out, l.ID()) {
			out = append(out, l.ID())
		}
	}
	return out
}

// NewValue returns a fresh lock value in this package's format (see Value)
// and its public lease id: what the adapters store instead of their
// library's random token, so that anyone reading the key (a refused caller,
// lockscope inspect, a restarted collector) learns who holds it, and the
// passive watcher leaves the lock to the events.
func NewValue(owner string, since time.Time) (value, lease string) {
	head := newHead()
	v := Value{Token: headToken(head), Lease: headLease(head), Since: since, Owner: owner}
	return v.String(), v.Lease
}

// NewLeaseID returns a public lease id alone, for a hold whose value the
// caller chose.
func NewLeaseID() string {
	var r [8]byte
	rand.Read(r[:]) // never fails since Go 1.24
	return hex.EncodeToString(r[:])
}

// HolderName names the holder of a lock from its stored value: the owner of
// a value in this package's format, else ForeignOwner's name (never the
// value itself).
func HolderName(value string) string {
	if v, err := ParseValue(value); err == nil {
		return v.Owner
	}
	return ForeignOwner(value)
}
