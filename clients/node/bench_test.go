package node

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

// TestBenchScriptRuns keeps bench/cycle.js (BENCHMARKS.md, "Node lock
// cycle") working: a tiny run prints a row per variant and number of
// callers, and its emitter wrote every event.
func TestBenchScriptRuns(t *testing.T) {
	checkNode(t)
	srv := redistest.Start(t, redistest.Options{Notify: "none"})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := nodeCmd(ctx, t, "bench/cycle.js", "--redis", srv.URL(), "--rounds", "3", "--cycles", "32", "--warmup", "10").CombinedOutput()
	if err != nil {
		t.Fatalf("bench/cycle.js: %v\n%s", err, out)
	}
	// 10 warm-up and 3 x (32 at 1 caller, 16 x 2 at 16) measured cycles of
	// the emitter variant, 2 events each.
	if !regexp.MustCompile(`emitter: 404 recorded, 404 sent in \d+ writes, 0 dropped`).Match(out) {
		t.Errorf("bench/cycle.js's emitter did not write its 404 events:\n%s", out)
	}
	for _, v := range []string{"redlock", "no-emitter", "emitter"} {
		for _, c := range []string{"1", "16"} {
			if !regexp.MustCompile(`(?m)^` + v + ` +` + c + ` +[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+x +[0-9.]+x$`).Match(out) {
				t.Errorf("bench/cycle.js printed no row for %s at %s callers:\n%s", v, c, out)
			}
		}
	}
}
