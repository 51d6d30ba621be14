package python

import (
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/lockscope/lockscope/lock"
)

// TestPythonHolderAsked: a Python holder (lockscope.Lock.listen) with a
// 30 s TTL hears `lockscope release KEY --ask` at once and releases, and
// the command exits 0; one that ignores the request is force-released by
// --then-force after the grace.
func TestPythonHolderAsked(t *testing.T) {
	checkPython(t)
	ctx := redistest.Context(t)
	srv := redistest.Start(t, redistest.Options{})
	rdb := srv.Client(t)
	lc := lock.New(rdb, nil)
	bin := redistest.Lockscope(t)
	run := func(args ...string) (string, int) {
		t.Helper()
		cmd := exec.CommandContext(ctx, bin, append([]string{"release", "--redis", srv.URL()}, args...)...)
		cmd.Env = append(cmd.Environ(), "LOCKSCOPE_OPERATOR_USER=bob")
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code
	}
	listening := func(p *pyProc, key string) string {
		t.Helper()
		lease := strings.TrimPrefix(p.expect(t, "listening ", 30*time.Second), "listening ")
		redistest.WaitFor(t, 15*time.Second, "the Python holder's subscription", func() bool {
			h, err := lc.Inspect(ctx, key)
			if err != nil || h.Lease != lease {
				return false
			}
			n, err := lc.Listeners(ctx, h)
			return err == nil && n == 1
		})
		return lease
	}

	py := startPython(ctx, t, "tests/drivers/ask_holder.py", "--redis", srv.URL(), "--key", "workflow:7", "--owner", "py/editor", "--ttl", "30", "--release")
	listening(py, "workflow:7")
	out, code := run("workflow:7", "--ask", "--grace", "30s", "--reason", "I need to edit it")
	if code != 0 || !strings.Contains(out, "asked py/editor to release workflow:7 (heard by 1 listener)") || !strings.Contains(out, "released by its holder after ") {
		t.Fatalf("release --ask of a Python holder that releases: exit %d, want 0:\n%s", code, out)
	}
	f := strings.Split(strings.TrimPrefix(py.expect(t, "heard ", 30*time.Second), "heard "), "|")
	if len(f) != 4 || f[0] != "bob" || f[1] != "I need to edit it" || f[2] != "30.0" {
		t.Fatalf("the Python holder heard %q, want bob's request with its reason and a 30 s grace", f)
	}
	// Heard at once, not at a renewal: sooner after it began to listen
	// than its TTL (which includes starting the command).
	if s, err := strconv.ParseFloat(f[3], 64); err != nil || s >= 30 {
		t.Errorf("heard %q s after listening, want under the 30 s TTL", f[3])
	}
	py.wait(t, 30*time.Second)
	if got := py.output(); got[len(got)-1] != "released" {
		t.Errorf("the Python holder's last words = %q, want released", got)
	}
	if _, err := lc.Inspect(ctx, "workflow:7"); err == nil {
		t.Errorf("workflow:7 still held after the Python holder released")
	}

	// A holder that ignores the request: forced after the grace.
	stubborn := startPython(ctx, t, "tests/drivers/ask_holder.py", "--redis", srv.URL(), "--key", "report:9", "--owner", "py/busy", "--ttl", "30")
	listening(stubborn, "report:9")
	out, code = run("report:9", "--ask", "--grace", "1s", "--then-force", "--yes", "--reason", "blocking the deploy")
	if code != 0 || !strings.Contains(out, "no answer in 1s") || !strings.Contains(out, "released report:9 (held by py/busy") {
		t.Fatalf("release --ask --then-force of a Python holder that ignores it: exit %d, want 0, forced:\n%s", code, out)
	}
	f = strings.Split(strings.TrimPrefix(stubborn.expect(t, "heard ", 30*time.Second), "heard "), "|")
	if len(f) != 4 || f[0] != "bob" {
		t.Fatalf("the ignoring holder heard %q, want bob's request", f)
	}
	if _, err := lc.Inspect(ctx, "report:9"); err == nil {
		t.Errorf("report:9 still held after --then-force")
	}
}
