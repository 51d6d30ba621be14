package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lockscope/lockscope/internal/redistest"
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
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// Wrong passwords are logged with source and user (not one line each),
// counted in /metrics, and a source that keeps guessing is refused with 429
// and Retry-After, even with the right password, until its minute ends.
func TestPasswordGuessingIsLoggedCountedAndRefused(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	addr := freeAddr(t)
	base := "http://" + addr
	p := start(t, []string{"LOCKSCOPE_REDIS_URL=" + srv.URL(), "LOCKSCOPE_LISTEN=" + addr,
		"LOCKSCOPE_OPERATOR_USER=ops", "LOCKSCOPE_OPERATOR_PASSWORD=correct-horse"}, "serve")
	eventually(t, 15*time.Second, func() string {
		if code, _, err := get(context.Background(), base+"/readyz"); err != nil || code != 200 {
			return fmt.Sprintf("GET /readyz = %d, %v", code, err)
		}
		return ""
	})
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
	addr := freeAddr(t)
	base := "http://" + addr
	start(t, []string{"LOCKSCOPE_REDIS_URL=" + srv.URL(), "LOCKSCOPE_LISTEN=" + addr}, "serve")
	eventually(t, 15*time.Second, func() string {
		if code, _, err := get(context.Background(), base+"/readyz"); err != nil || code != 200 {
			return fmt.Sprintf("GET /readyz = %d, %v", code, err)
		}
		return ""
	})
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
