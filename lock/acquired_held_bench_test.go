package lock

import (
	"context"
	"testing"
	"time"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

// countRecorder counts events and keeps none, so a benchmark's memory stays
// flat.
type countRecorder struct{ n, held int }

func (r *countRecorder) Record(e event.Event) {
	r.n++
	if e.Reason != "" {
		r.held++
	}
}

// BenchmarkObtainHeld measures an Obtain and Release against the shared
// Redis with and without an outer lock in the context: what listing the
// held leases on the acquired event costs (issue 40). held measures that
// listing alone (HeldLeases and JoinLeases, as the acquired event calls
// them).
func BenchmarkObtainHeld(b *testing.B) {
	rdb := redistest.Shared(b).Client(b)
	prefix := redistest.KeyPrefix(b)
	ctx := context.Background()
	cycle := func(b *testing.B, ctx context.Context) {
		rec := &countRecorder{}
		c := New(rdb, &Options{Owner: "bench", Recorder: rec})
		b.ReportAllocs()
		for b.Loop() {
			l, err := c.Obtain(ctx, prefix+"inner", 10*time.Second, nil)
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
		// listed/op: the share of acquisitions whose event listed a held
		// lease (1 under the outer lock, 0 without).
		b.ReportMetric(float64(rec.held)/float64(max(rec.n/2, 1)), "listed/op")
	}
	outer, err := New(rdb, &Options{Owner: "bench"}).Obtain(ctx, prefix+"outer", time.Minute, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer outer.Release(ctx)
	b.Run("obtain/none", func(b *testing.B) { cycle(b, ctx) })
	b.Run("obtain/outer", func(b *testing.B) { cycle(b, outer.Context()) })
	for _, c := range []struct {
		name string
		ctx  context.Context
	}{{"held/none", ctx}, {"held/outer", outer.Context()}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				n += len(event.JoinLeases(HeldLeases(c.ctx)))
			}
			if n == 0 && c.ctx != ctx {
				b.Fatal("no lease listed under an outer lock")
			}
		})
	}
}
