package reliability

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/redistest"
)

func TestMain(m *testing.M) {
	if name := os.Getenv(helperEnv); name != "" {
		os.Exit(runHelper(name))
	}
	flag.Parse()
	if !testing.Verbose() {
		// go-redis logs every failed dial; the fault tests cause thousands.
		redis.SetLogger(quietRedis{})
	}
	redistest.Main(m)
}

type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

// testCtx returns a context that ends after d, or a little before the test
// binary's deadline, whichever comes first, so a hung call fails the test
// with a message instead of killing the binary.
func testCtx(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	if tt, ok := t.(*testing.T); ok {
		if dl, ok := tt.Deadline(); ok {
			if left := time.Until(dl) - 5*time.Second; left < d {
				d = max(left, time.Second)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// streamEvents reads every entry of stream and decodes it, returning the
// events and the number of entries that did not decode.
func streamEvents(ctx context.Context, t testing.TB, rdb redis.UniversalClient, stream string) ([]event.Event, int) {
	t.Helper()
	var out []event.Event
	bad := 0
	start := "-"
	for {
		msgs, err := rdb.XRangeN(ctx, stream, start, "+", 1000).Result()
		if err != nil {
			t.Fatalf("XRANGE %s: %v", stream, err)
		}
		for _, m := range msgs {
			evs, err := event.Decode(m.Values)
			if err != nil {
				bad++
				continue
			}
			out = append(out, evs...)
		}
		if len(msgs) < 1000 {
			return out, bad
		}
		start = "(" + msgs[len(msgs)-1].ID
	}
}

// countTypes counts events by type; Dropped events count their Count.
func countTypes(evs []event.Event) (byType map[event.Type]int, droppedReported int64) {
	byType = make(map[event.Type]int)
	for _, e := range evs {
		byType[e.Type]++
		if e.Type == event.Dropped {
			droppedReported += e.Count
		}
	}
	return byType, droppedReported
}

// waitFor polls cond every 20ms until it holds or ctx ends; it reports
// whether cond held.
func waitFor(ctx context.Context, cond func() bool) bool {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		if cond() {
			return true
		}
		select {
		case <-ctx.Done():
			return cond()
		case <-t.C:
		}
	}
}

// quietLog discards logs of components under test unless -v is given.
func quietLog() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	return slog.New(slog.DiscardHandler)
}
