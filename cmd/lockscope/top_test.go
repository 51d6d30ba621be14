package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/lockscope/lockscope/lock"
)

// lockscope top, driven through a real terminal (tmux) against a real
// serve on a real Redis, with locks taken by the Go library.

// scene is a Redis, a serve watching its stream, and a lock client
// emitting to it.
type scene struct {
	t     *testing.T
	rdb   *redis.Client
	lc    *lock.Client
	base  string
	serve *proc
}

func newScene(t *testing.T, serveEnv ...string) *scene {
	t.Helper()
	srv := redistest.Start(t, redistest.Options{})
	rdb := srv.Client(t)
	em := lock.NewEmitter(rdb, &lock.EmitterOptions{FlushInterval: 10 * time.Millisecond})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		em.Close(ctx)
	})
	base, p := serveReady(t, append([]string{"LOCKSCOPE_REDIS_URL=" + srv.URL()}, serveEnv...))
	return &scene{t: t, rdb: rdb, lc: lock.New(rdb, &lock.Options{Recorder: em}), base: base, serve: p}
}

// hold takes key as owner, renewed until the test ends (or it is released).
func (s *scene) hold(key, owner string) *lock.Lease {
	s.t.Helper()
	l, err := s.lc.Obtain(context.Background(), key, 10*time.Second, &lock.ObtainOptions{Owner: owner, AutoRenew: true})
	if err != nil {
		s.t.Fatalf("Obtain(%q) = %v, want nil", key, err)
	}
	s.t.Cleanup(func() { l.Release(context.Background()) })
	return l
}

// wait starts a caller that waits for key as owner (from ctx, which may
// carry the leases it holds) until it gets it, gives up after two minutes,
// or the test ends.
func (s *scene) wait(ctx context.Context, key, owner string) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		l, err := s.lc.Obtain(ctx, key, 10*time.Second, &lock.ObtainOptions{Owner: owner, Retry: lock.LinearBackoff(250 * time.Millisecond)})
		if err == nil {
			l.Release(context.Background())
		}
	}()
	s.t.Cleanup(func() { cancel(); wg.Wait() })
}

// deadlock makes two callers each hold one key and wait for the other's.
func (s *scene) deadlock(k1, o1, k2, o2 string) {
	s.t.Helper()
	l1, l2 := s.hold(k1, o1), s.hold(k2, o2)
	s.wait(l1.Context(), k2, o1)
	s.wait(l2.Context(), k1, o2)
}

// The picture as an on-call engineer meets it: a key with three waiters,
// a deadlocked pair, a new lock appearing, a key's detail, the viewer's
// refusal of a release, and q, at 80×24 without colour and at 200×50 with.
func TestTopShowsTheLivePicture(t *testing.T) {
	t.Parallel()
	s := newScene(t)
	s.hold("invoice:42", "billing-batch/pod-1")
	for _, w := range []string{"invoice-worker/1", "invoice-worker/2", "invoice-worker/3"} {
		s.wait(context.Background(), "invoice:42", w)
	}
	s.deadlock("ledger:account-501", "payments-api/pod-2", "ledger:account-502", "ledger-sync/pod-1")

	small := newTerminal(t, 80, 24, []string{"NO_COLOR=1"}, "top", "--url", s.base, "--interval", "500ms")
	wide := newTerminal(t, 200, 50, nil, "top", "--url", s.base, "--interval", "500ms")

	// At 80 columns the owner is cut: "billing-batch/pod…".
	three := regexp.MustCompile(`(?m)invoice:42 +billing-batch/pod(-1|…) +\S+ +\S+ +3 *$`)
	for _, term := range []*terminal{small, wide} {
		term.waitFor("invoice:42 held by billing-batch/pod-1 with 3 waiters, 5 waiting and a deadlock in the header", func(sc string) error {
			switch {
			case !three.MatchString(sc):
				return errors.New("no row: invoice:42, billing-batch/pod-1, 3 waiters")
			case !strings.Contains(sc, "waiting 5"), !strings.Contains(sc, "deadlocks 1"):
				return errors.New("the header does not count 5 waiting and 1 deadlock")
			case !strings.Contains(sc, "DEADLOCK: "):
				return errors.New("no deadlock banner")
			}
			return nil
		})
	}
	lines := strings.Split(small.screen(), "\n")
	if !strings.HasPrefix(lines[0], "lockscope top "+s.base) || !strings.HasPrefix(lines[23], "q quit") {
		t.Errorf("80×24: first line %q, last %q; want the title first and the keys on the 24th", lines[0], lines[23])
	}
	if figures := strings.Split(wide.screen(), "\n")[1]; !strings.Contains(figures, "acq/s") || !strings.Contains(figures, "deadlocks 1") {
		t.Errorf("200×50: figures line %q, want every figure on one line", figures)
	}
	// Colour in the colour terminal, none at all under NO_COLOR.
	if e := wide.screenEscapes(); !strings.Contains(e, "\x1b[") {
		t.Errorf("200×50 without NO_COLOR: no escape sequence in the capture, want colours")
	}
	if e := small.screenEscapes(); strings.Contains(e, "\x1b") {
		t.Errorf("80×24 with NO_COLOR: the capture carries escape sequences:\n%q", e)
	}

	// The deadlocked pair, each with what it holds and waits for.
	small.press("2")
	small.waitText("DEADLOCKS: 1 cycle",
		"payments-api/pod-2 holds ledger:account-501, waits for ledger:account-502",
		"ledger-sync/pod-1 holds ledger:account-502, waits for ledger:account-501")
	writeTopShot(t, "top-blocking", small.screen())

	// The held locks by waiters: invoice:42 first; its detail.
	small.press("1", "s", "s", "Home")
	small.waitFor("invoice:42 selected, sorted by waiters", func(sc string) error {
		if !strings.Contains(selectedLine(sc), "invoice:42") || !strings.Contains(sc, "sort: waiters") {
			return errors.New("not yet")
		}
		return nil
	})
	small.press("Enter")
	deadline := regexp.MustCompile(`invoice-worker/\d +\S+ +in (1m5\d|2m0\d)s`)
	small.waitFor("invoice:42's detail: holder, 3 waiters with deadlines", func(sc string) error {
		switch {
		case !strings.Contains(sc, "Holder      billing-batch/pod-1"):
			return errors.New("no holder")
		case !strings.Contains(sc, "WAITERS NOW (3)"):
			return errors.New("not 3 waiters")
		case len(deadline.FindAllString(sc, -1)) != 3:
			return errors.New("not 3 waiters each giving up in about 2 minutes")
		case !strings.Contains(sc, "RECENT EVENTS") || !strings.Contains(sc, "acquired"):
			return errors.New("no recent events")
		}
		return nil
	})
	for _, w := range []string{"invoice-worker/1", "invoice-worker/2", "invoice-worker/3"} {
		if !strings.Contains(small.screen(), w) {
			t.Errorf("detail lacks waiter %s", w)
		}
	}
	writeTopShot(t, "top-detail", small.screen())

	// A viewer cannot release: told why, nothing sent.
	small.press("f")
	small.waitText("force release needs operator credentials")
	if h, err := s.lc.Inspect(context.Background(), "invoice:42"); err != nil || h.Owner != "billing-batch/pod-1" {
		t.Errorf("after a viewer's f: Inspect = %v, %v; want still billing-batch/pod-1", h, err)
	}
	small.press("Escape")

	// A new lock appears at the next refresh, with more waiters: it sorts
	// above invoice:42, and the selection stays on invoice:42.
	s.hold("report:nightly", "reports/pod-7")
	for _, w := range []string{"report-reader/1", "report-reader/2", "report-reader/3", "report-reader/4"} {
		s.wait(context.Background(), "report:nightly", w)
	}
	four := regexp.MustCompile(`(?m)^  report:nightly +reports/pod-7 +\S+ +\S+ +4 *$`)
	for _, term := range []*terminal{small, wide} {
		term.waitFor("report:nightly with 4 waiters above the selected invoice:42", func(sc string) error {
			if term == wide {
				if !strings.Contains(sc, "report:nightly") {
					return errors.New("no report:nightly")
				}
				return nil
			}
			switch {
			case !four.MatchString(sc):
				return errors.New("no row: report:nightly, reports/pod-7, 4 waiters")
			case strings.Index(sc, "report:nightly") > strings.Index(sc, "invoice:42"):
				return errors.New("report:nightly not above invoice:42")
			case !strings.Contains(selectedLine(sc), "invoice:42"):
				return fmt.Errorf("the selection moved to %q, want invoice:42", selectedLine(sc))
			}
			return nil
		})
	}
	if sc := small.screen(); strings.Contains(sc, "operator credentials") {
		t.Errorf("esc left the last outcome on the screen:\n%s", sc)
	}
	writeTopShot(t, "top", small.screen())

	for _, term := range []*terminal{small, wide} {
		term.press("q")
		if code := term.exited(); code != 0 {
			t.Errorf("%d×%d: q: exit status %d, want 0", term.w, term.h, code)
		}
		// The terminal is the shell's again: the alternate screen left, the
		// cursor shown.
		if alt, cur := term.value("#{alternate_on}"), term.value("#{cursor_flag}"); alt != "0" || cur != "1" {
			t.Errorf("%d×%d after q: alternate screen %s, cursor shown %s; want 0 and 1", term.w, term.h, alt, cur)
		}
	}
}

// writeTopShot keeps a capture of the terminal as docs/NAME.txt, and
// docs/reference.md's copy of it, only when LOCKSCOPE_UPDATE_SCREENSHOTS=1 (make
// screenshots): a test run leaves the tracked files alone.
func writeTopShot(t *testing.T, name, screen string) {
	t.Helper()
	if os.Getenv("LOCKSCOPE_UPDATE_SCREENSHOTS") != "1" {
		return
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimRight(screen, "\n"), "\n") {
		lines = append(lines, strings.TrimRight(l, " "))
	}
	shot := strings.Join(lines, "\n") + "\n"
	if err := os.WriteFile(filepath.Join("..", "..", "docs", name+".txt"), []byte(shot), 0o644); err != nil {
		t.Fatal(err)
	}
	readme := filepath.Join("..", "..", "docs", "reference.md")
	b, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	begin, end := "<!-- "+name+".txt -->\n```text\n", "```\n<!-- end "+name+".txt -->"
	i, j := strings.Index(string(b), begin), strings.Index(string(b), end)
	if i < 0 || j < i {
		return // the reference shows only some of the captures
	}
	out := string(b[:i+len(begin)]) + shot + string(b[j:])
	if err := os.WriteFile(readme, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A force release from top releases what the confirmation showed: when
// the lock changes hands between the confirmation and the submit, the
// serve refuses and the new holder keeps it; when it did not, the lock is
// released and the release is recorded with its reason.
func TestTopForceReleaseReleasesWhatYouSaw(t *testing.T) {
	t.Parallel()
	const token = "tok-oncall-0123456789"
	s := newScene(t, "LOCKSCOPE_OPERATOR_TOKEN="+token)
	const key = "export:tenant-7"
	first := s.hold(key, "export-worker/pod-1")
	seen, err := s.lc.Inspect(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	term := newTerminal(t, 80, 24, []string{"NO_COLOR=1", "LOCKSCOPE_OPERATOR_TOKEN=" + token}, "top", "--url", s.base, "--interval", "500ms")
	term.waitFor("export:tenant-7 selected", func(sc string) error {
		if !strings.Contains(selectedLine(sc), key) {
			return errors.New("not selected")
		}
		return nil
	})
	term.press("f")
	term.waitText("Force-release export:tenant-7?", "Holder export-worker/pod-1", "Fingerprint "+seen.Fingerprint[:12], "Reason")

	// Another holder takes it before the operator confirms.
	if err := first.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.hold(key, "export-worker/pod-2")
	now, err := s.lc.Inspect(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	term.typeText("stuck since the deploy")
	term.press("Enter")
	term.waitText(fmt.Sprintf("Owner changed: export:tenant-7 is now held by export-worker/pod-2 (fingerprint %s), not export-worker/pod-1; nothing was released", now.Fingerprint[:12]))
	if h, err := s.lc.Inspect(context.Background(), key); err != nil || h.Fingerprint != now.Fingerprint {
		t.Fatalf("after the refused release: Inspect = %+v, %v; want pod-2's hold untouched", h, err)
	}

	// Confirmed against the holder shown now: released.
	term.press("f")
	term.waitText("Force-release export:tenant-7?", "Holder export-worker/pod-2", "Fingerprint "+now.Fingerprint[:12])
	term.typeText("runbook step 3")
	term.press("Enter")
	term.waitText("Released export:tenant-7 (held by export-worker/pod-2), recorded as forced by token: runbook step 3")
	if h, err := s.lc.Inspect(context.Background(), key); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("after the release: Inspect = %+v, %v; want ErrNotHeld", h, err)
	}
	var forced []event.Event
	redistest.WaitFor(t, 30*time.Second, "the forced event in the stream", func() bool {
		forced = forced[:0]
		for _, e := range redistest.ReadStream(t, s.rdb, "lockscope:events").Events {
			if e.Type == event.Forced && e.Key == key {
				forced = append(forced, e)
			}
		}
		return len(forced) > 0
	})
	if len(forced) != 1 || forced[0].Reason != "runbook step 3" || forced[0].By != "token" || forced[0].Owner != "export-worker/pod-2" {
		t.Errorf("forced events of %s = %+v, want one of export-worker/pod-2's hold by token: runbook step 3", key, forced)
	}
	term.press("q")
	if code := term.exited(); code != 0 {
		t.Errorf("q: exit status %d, want 0", code)
	}
}

// Asking the holder to release: against a serve with POST
// /api/v1/locks/{key}/ask the request is recorded (a requested event
// with the reason) and the lock left to its holder. (What top says to an
// older serve without the route is a unit test of package top.)
func TestTopAskToRelease(t *testing.T) {
	t.Parallel()
	const token = "tok-oncall-0123456789"
	s := newScene(t, "LOCKSCOPE_OPERATOR_TOKEN="+token)
	const key = "export:tenant-9"
	s.hold(key, "export-worker/pod-1")

	// Does this serve route the ask? A POST without credentials changes
	// nothing: the router answers 404 "no such page" for a route it lacks,
	// the route itself wants credentials.
	req, _ := http.NewRequest(http.MethodPost, s.base+"/api/v1/locks/"+key+"/ask", strings.NewReader(`{}`))
	req.Header.Set("Content-Type", "application/json")
	resp, body := send(t, req)
	routed := !(resp.StatusCode == http.StatusNotFound && strings.Contains(body, "no such page")) && resp.StatusCode != http.StatusMethodNotAllowed
	if !routed {
		t.Fatalf("POST /api/v1/locks/{key}/ask without credentials: %d %s; want the route to exist and ask for credentials", resp.StatusCode, strings.TrimSpace(body))
	}

	term := newTerminal(t, 80, 24, []string{"NO_COLOR=1", "LOCKSCOPE_OPERATOR_TOKEN=" + token}, "top", "--url", s.base, "--interval", "500ms")
	term.waitFor("export:tenant-9 selected", func(sc string) error {
		if !strings.Contains(selectedLine(sc), key) {
			return errors.New("not selected")
		}
		return nil
	})
	term.press("a")
	term.waitText("Ask export-worker/pod-1 to release export:tenant-9?", "Reason", "Grace")
	term.typeText("deploy in 5 minutes")
	term.press("Tab")
	term.typeText("45s")
	term.press("Enter")
	term.waitText("Asked export-worker/pod-1 to release export:tenant-9 within 45s: deploy in 5 minutes")
	redistest.WaitFor(t, 30*time.Second, "a requested event with the reason", func() bool {
		for _, e := range redistest.ReadStream(t, s.rdb, "lockscope:events").Events {
			if e.Type == event.Requested && e.Key == key && e.Reason == "deploy in 5 minutes" {
				return true
			}
		}
		return false
	})
	if h, err := s.lc.Inspect(context.Background(), key); err != nil || h.Owner != "export-worker/pod-1" {
		t.Errorf("after asking: Inspect = %+v, %v; want the lock still export-worker/pod-1's", h, err)
	}
	term.press("q")
	if code := term.exited(); code != 0 {
		t.Errorf("q: exit status %d, want 0", code)
	}
}

// When the serve goes away top keeps what it showed and says since when
// it is stale; while the serve answers it says nothing of the kind.
func TestTopSaysWhenItsDataIsStale(t *testing.T) {
	t.Parallel()
	s := newScene(t)
	s.hold("invoice:7", "billing-batch/pod-3")
	term := newTerminal(t, 80, 24, []string{"NO_COLOR=1"}, "top", "--url", s.base, "--interval", "300ms")
	sc := term.waitText("● ingesting", "invoice:7")
	if strings.Contains(sc, "STALE") {
		t.Errorf("a stale banner while the serve answers:\n%s", sc)
	}
	s.serve.signal(syscall.SIGTERM)
	s.serve.wait(60 * time.Second)
	term.waitFor("the stale banner, with the lock still shown", func(sc string) error {
		if !regexp.MustCompile(`STALE since \d\d:\d\d:\d\d \(\S+ ago\): overview`).MatchString(sc) || !strings.Contains(sc, "invoice:7") {
			return errors.New("not yet")
		}
		return nil
	})
	term.press("q")
	if code := term.exited(); code != 0 {
		t.Errorf("q: exit status %d, want 0", code)
	}
}

// Bad flags get a usage error (exit 2) naming what is wrong, and top
// refuses to draw on something that is not a terminal (exit 1).
func TestTopUsage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"top"}, 2, "--url is required"},
		{[]string{"top", "--url", "lockscope:8080"}, 2, "want http:// or https://"},
		{[]string{"top", "--url", "http://127.0.0.1:1", "--interval", "10ms"}, 2, "--interval must be at least 200ms"},
		{[]string{"top", "--url", "http://127.0.0.1:1", "--operator-user", "ops"}, 2, "--operator-user and --operator-password go together"},
		{[]string{"top", "--url", "http://127.0.0.1:1"}, 1, "not a terminal"},
	} {
		_, stderr, code := lockscope(t, nil, "", tc.args...)
		if code != tc.code {
			t.Errorf("lockscope %s: exit %d, want %d (stderr %q)", strings.Join(tc.args, " "), code, tc.code, stderr)
		}
		oneLine(t, stderr, "lockscope top: ", tc.want)
	}
}
