package python

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

// TestBenchScriptRuns keeps bench/cycle.py (BENCHMARKS.md, "Python lock
// cycle") working: a tiny run prints a row per variant, and its emitter
// wrote every event.
func TestBenchScriptRuns(t *testing.T) {
	checkPython(t)
	srv := redistest.Start(t, redistest.Options{Notify: "none"})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := pythonCmd(ctx, t, "bench/cycle.py", "--redis", srv.URL(), "--rounds", "3", "--cycles", "20").CombinedOutput()
	if err != nil {
		t.Fatalf("bench/cycle.py: %v\n%s", err, out)
	}
	// 100 warm-up and 3 x 20 measured cycles of the emitter variant, 2 events each.
	if !regexp.MustCompile(`emitter: 320 events in \d+ writes, 0 dropped`).Match(out) {
		t.Errorf("bench/cycle.py's emitter did not write its 320 events:\n%s", out)
	}
	for _, v := range []string{"redis-py", "no-emitter", "emitter"} {
		if !regexp.MustCompile(`(?m)^` + v + ` +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+x +[0-9.]+x$`).Match(out) {
			t.Errorf("bench/cycle.py printed no row for %s:\n%s", v, out)
		}
	}
}
