package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/lockscope/lockscope/lock"
)

// request sends a GET with an optional Host header and Basic credentials.
func request(t *testing.T, url, host, user, pass string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	if user != "" {
		req.SetBasicAuth(user, pass)
	}
	return send(t, req)
}

// Wrong passwords are logged with source and user (not one line each),
// counted in /metrics, and a source that keeps guessing is refused with 429
// and Retry-After, even with the right password, until its minute ends.
func TestPasswordGuessingIsLoggedCountedAndRefused(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	base, p := serveReady(t, []string{"LOCKSCOPE_REDIS_URL=" + srv.URL(), "LOCKSCOPE_OPERATOR_USER=ops", "LOCKSCOPE_OPERATOR_PASSWORD=correct-horse"})
	if resp, _ := request(t, base+"/api/v1/overview", "", "ops", "correct-horse"); resp.StatusCode != 200 {
		t.Fatalf("right password: %d, want 200", resp.StatusCode)
	}
	var codes []int
	for i := range 12 {
		resp, _ := request(t, base+"/keys/x/release", "", "admin", fmt.Sprintf("guess-%d", i))
		codes = append(codes, resp.StatusCode)
		if i == 11 && resp.Header.Get("Retry-After") == "" {
			t.Errorf("429 without Retry-After")
		}
	}
	want := []int{401, 401, 401, 401, 401, 401, 401, 401, 401, 401, 401, 429}
	if fmt.Sprint(codes) != fmt.Sprint(want) {
		t.Errorf("12 wrong passwords answered %v, want %v", codes, want)
	}
	if resp, _ := request(t, base+"/api/v1/overview", "", "ops", "correct-horse"); resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("right password from the refused source: %d, want 429 until the window ends", resp.StatusCode)
	}
	if code, _, _ := get(context.Background(), base+"/api/v1/overview"); code != 200 {
		t.Errorf("reading without credentials from the refused source: %d, want 200 (reading is open)", code)
	}
	_, metrics, _ := get(context.Background(), base+"/metrics")
	if n, ok := metricSum(metrics, "lockscope_auth_failures_total"); !ok || n != 11 {
		t.Errorf("lockscope_auth_failures_total = %v (found %v), want 11", n, ok)
	}
	logs := p.stderr.String()
	if n := strings.Count(logs, "failed authentication"); n != 2 {
		t.Errorf("%d log lines about failed authentications, want 2 (the first, and the refusal)\n%s", n, logs)
	}
	if !strings.Contains(logs, "source=127.0.0.1") || !strings.Contains(logs, "user=admin") {
		t.Errorf("the log does not name the source and the user tried:\n%s", logs)
	}
}

// A DNS-rebinding page reaches the dashboard under the attacker's host name:
// such requests are refused; loopback names and IP addresses pass.
func TestForeignHostNamesAreRefused(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	base, _ := serveReady(t, []string{"LOCKSCOPE_REDIS_URL=" + srv.URL()})
	addr := strings.TrimPrefix(base, "http://")
	port := addr[strings.LastIndex(addr, ":"):]
	for host, want := range map[string]int{
		"rebind.attacker.example" + port: http.StatusMisdirectedRequest,
		"localhost.evil.example":         http.StatusMisdirectedRequest,
		"localhost" + port:               200,
		"LOCALHOST." + port:              200,
		"127.0.0.1" + port:               200,
		"[::1]" + port:                   200,
	} {
		for _, path := range []string{"/", "/api/v1/locks", "/metrics"} {
			resp, body := request(t, base+path, host, "", "")
			if resp.StatusCode != want {
				t.Errorf("GET %s with Host %s = %d, want %d", path, host, resp.StatusCode, want)
			}
			if want != 200 && !strings.Contains(body, "LOCKSCOPE_ALLOWED_HOSTS") {
				t.Errorf("GET %s with Host %s: the refusal does not say how to allow it: %s", path, host, body)
			}
		}
	}
}

// Named tokens: a release made with one is recorded as by its name.
func TestReleasesWithNamedTokensNameWho(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	rdb := srv.Client(t)
	ctx := context.Background()
	file := t.TempDir() + "/tokens"
	if err := os.WriteFile(file, []byte("# on-call tokens\nalice  tok-alice-0123456789\nci-bot tok-ci-bot-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const stream = "named:events"
	base, _ := serveReady(t, []string{"LOCKSCOPE_REDIS_URL=" + srv.URL(), "LOCKSCOPE_STREAM=" + stream, "LOCKSCOPE_OPERATOR_TOKENS_FILE=" + file})
	rdb.Set(ctx, "job:stuck", "5f0c6e1aa7e211ef9c2b0242ac120002", time.Minute)
	for tok, want := range map[string]int{"tok-wrong-0123456789": 401, "tok-ci-bot-0123456789": 200} {
		code, b := apiRelease(t, base, "job:stuck", lock.Fingerprint("5f0c6e1aa7e211ef9c2b0242ac120002"), "hung", tok)
		if code != want || want == 200 && !strings.Contains(b, `"by":"ci-bot"`) {
			t.Errorf("release with %s = %d %s, want %d (by ci-bot)", tok, code, b, want)
		}
	}
	redistest.WaitFor(t, 10*time.Second, "the forced event on the stream", func() error {
		for _, e := range redistest.ReadStream(t, rdb, stream).Events {
			if e.Type == event.Forced && e.Key == "job:stuck" {
				if e.By != "ci-bot" {
					return fmt.Errorf("forced event by %q, want ci-bot", e.By)
				}
				return nil
			}
		}
		return errors.New("no forced event in the stream")
	})

	// A bad file is a usage error naming the line.
	os.WriteFile(file, []byte("alice short\n"), 0o600)
	_, errOut, code := lockscope(t, []string{"LOCKSCOPE_REDIS_URL=" + srv.URL(), "LOCKSCOPE_LISTEN=" + freeAddr(t), "LOCKSCOPE_OPERATOR_TOKENS_FILE=" + file}, "", "serve")
	if code != 2 || !strings.Contains(errOut, ":1:") {
		t.Errorf("serve with a bad tokens file = %d %s, want 2 naming the line", code, errOut)
	}
}
