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
	"github.com/lockscope/lockscope/internal/testkit/redistest"
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
// binary's deadline (redistest.Context), whichever comes first, so a hung
// call fails the test with a message instead of killing the binary.
func testCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(redistest.Context(t), d)
	t.Cleanup(cancel)
	return ctx
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

// quietLog discards logs of components under test unless -v is given.
func quietLog() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	return slog.New(slog.DiscardHandler)
}
