package reliability

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lockscope/lockscope/internal/testkit/faultproxy"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

// A stalled Redis sends no error, only silence: /readyz must turn 503 while
// Redis does not answer within a second, and 200 again once it does.
func TestReadyzTurnsUnreadyWhileRedisStalls(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	proxy := faultproxy.Start(t, srv.Addr())
	bin := redistest.Lockscope(t)
	p := startServe(t, bin, "redis://"+proxy.Addr(), nil)
	client := &http.Client{Timeout: 5 * time.Second}
	readyz := func() (int, string, time.Duration) {
		start := time.Now()
		resp, err := client.Get(p.url("/readyz"))
		if err != nil {
			return 0, err.Error(), time.Since(start)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), time.Since(start)
	}
	ctx := testCtx(t, 15*time.Second)
	if !redistest.Poll(ctx, func() bool { code, _, _ := readyz(); return code == 200 }) {
		t.Fatal("/readyz never 200 before the stall")
	}
	proxy.Stall()
	code, body, took := readyz()
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "did not answer") {
		t.Errorf("/readyz during a stall = %d %q, want 503 naming the silence", code, body)
	}
	// Answered at all: a /readyz waiting for Redis would outlast the
	// client's 5 s (the stall lasts until Resume). How soon is logged.
	t.Logf("/readyz answered %v into the stall (its Redis timeout: 1s)", took)
	// Two more probes, each waiting out its own second: 3 s of stall in
	// all, and still unready.
	for i := range 2 {
		if code, body, _ := readyz(); code != http.StatusServiceUnavailable {
			t.Errorf("/readyz probe %d into the stall = %d %q, want 503", i+2, code, body)
		}
	}
	proxy.Resume()
	if !redistest.Poll(ctx, func() bool { code, _, _ := readyz(); return code == 200 }) {
		code, body, _ := readyz()
		t.Errorf("/readyz after the stall = %d %q, want 200 again", code, body)
	}
}
