// Package held carries, in a context, the leases of the locks the caller
// holds, so that an adapter's waiting event can list them: those lists are
// the edges of the collector's wait-for graph, by which deadlocks are found.
// It also mints lockscope lock values for the adapters.
package held

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"time"

	"github.com/lockscope/lockscope/lock"
)

// Max bounds the leases one waiting event lists, as the lock package does.
const Max = 16

type key struct{}

type node struct {
	lease string
	held  func() bool
	outer *node
}

// With returns a context carrying lease, held (while held returns true) in
// addition to the leases ctx carries.
func With(ctx context.Context, lease string, held func() bool) context.Context {
	outer, _ := ctx.Value(key{}).(*node)
	return context.WithValue(ctx, key{}, &node{lease: lease, held: held, outer: outer})
}

// Leases returns the leases ctx carries that are still held, innermost
// first: the adapters' (With) and the lock package's innermost lease
// (lock.FromContext).
func Leases(ctx context.Context) []string {
	var out []string
	for n, _ := ctx.Value(key{}).(*node); n != nil && len(out) < Max; n = n.outer {
		if n.held() {
			out = append(out, n.lease)
		}
	}
	if l, ok := lock.FromContext(ctx); ok && len(out) < Max && l.Err() == nil {
		out = append(out, l.ID())
	}
	return out
}

// NewValue returns a fresh lock value in the lock package's format (see
// lock.Value) and its public lease id: what the adapters store instead of
// their library's random token, so that anyone reading the key (a refused
// caller, lockscope inspect, a restarted collector) learns who holds it, and
// the passive watcher leaves the lock to the events.
func NewValue(owner string, since time.Time) (value, lease string) {
	var r [24]byte
	rand.Read(r[:]) // never fails since Go 1.24
	lease = hex.EncodeToString(r[16:])
	v := lock.Value{Token: base64.RawURLEncoding.EncodeToString(r[:16]), Lease: lease, Since: since, Owner: owner}
	return v.String(), lease
}

// NewLease returns a public lease id alone, for a hold whose value the
// caller chose.
func NewLease() string {
	var r [8]byte
	rand.Read(r[:])
	return hex.EncodeToString(r[:])
}

// Holder names the holder of a lock from its stored value: the owner of a
// lockscope value, else lock.ForeignOwner's name (never the value itself).
func Holder(value string) string {
	if v, err := lock.ParseValue(value); err == nil {
		return v.Owner
	}
	return lock.ForeignOwner(value)
}
