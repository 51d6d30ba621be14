// Package clienttest is the harness the Node and Python packages' Go tests
// share: a real `lockscope serve` on loopback and what they read of its API
// and /metrics.
package clienttest

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

// Serve is a running `lockscope serve`.
type Serve struct {
	t      testing.TB
	listen string
}

// StartServe runs lockscope serve against redisURL until the test ends.
func StartServe(t testing.TB, redisURL string) *Serve {
	t.Helper()
	port, err := redistest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	s := &Serve{t: t, listen: "127.0.0.1:" + strconv.Itoa(port)}
	cmd := exec.Command(redistest.Lockscope(t), "serve", "--redis", redisURL, "--listen", s.listen, "--log-level", "warn")
	var out strings.Builder
	var mu sync.Mutex
	cmd.Stdout = writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return out.Write(p) })
	cmd.Stderr = cmd.Stdout
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
		if t.Failed() {
			mu.Lock()
			t.Logf("lockscope serve output:\n%s", out.String())
			mu.Unlock()
		}
	})
	redistest.WaitFor(t, 30*time.Second, "lockscope serve to answer /readyz", func() bool {
		select {
		case <-done:
			t.Fatalf("lockscope serve exited: %v", cmd.ProcessState)
		default:
		}
		resp, err := http.Get(s.URL("/readyz"))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return s
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func (s *Serve) URL(path string) string { return "http://" + s.listen + path }

// Get fetches path; JSON answers are decoded into v, others returned.
func (s *Serve) Get(path string, v any) string {
	s.t.Helper()
	resp, err := http.Get(s.URL(path))
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		s.t.Fatalf("GET %s = %s: %s", path, resp.Status, b)
	}
	if v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			s.t.Fatalf("GET %s: %v\n%s", path, err, b)
		}
	}
	return string(b)
}

// Metric sums the samples of a metric family on /metrics whose labels
// include match.
func (s *Serve) Metric(name string, match map[string]string) float64 {
	s.t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(s.Get("/metrics", nil)))
	if err != nil {
		s.t.Fatalf("/metrics: %v", err)
	}
	var sum float64
	f := fams[name]
	if f == nil {
		return 0
	}
next:
	for _, m := range f.Metric {
		labels := map[string]string{}
		for _, l := range m.Label {
			labels[l.GetName()] = l.GetValue()
		}
		for k, v := range match {
			if labels[k] != v {
				continue next
			}
		}
		switch {
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		}
	}
	return sum
}

// Histogram returns the sample count and sum of a histogram family on
// /metrics over the samples whose labels include match.
func (s *Serve) Histogram(name string, match map[string]string) (count uint64, sum float64) {
	s.t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(s.Get("/metrics", nil)))
	if err != nil {
		s.t.Fatalf("/metrics: %v", err)
	}
	f := fams[name]
	if f == nil {
		return 0, 0
	}
next:
	for _, m := range f.Metric {
		labels := map[string]string{}
		for _, l := range m.Label {
			labels[l.GetName()] = l.GetValue()
		}
		for k, v := range match {
			if labels[k] != v {
				continue next
			}
		}
		if h := m.Histogram; h != nil {
			count += h.GetSampleCount()
			sum += h.GetSampleSum()
		}
	}
	return count, sum
}

// LockDetail is what the tests read of GET /api/v1/locks/{key}.
type LockDetail struct {
	Class        string `json:"class"`
	Held         bool   `json:"held"`
	Owner        string `json:"owner"`
	Lease        string `json:"lease"`
	Acquisitions int64  `json:"acquisitions"`
	Contentions  int64  `json:"contentions"`
	Failures     int64  `json:"failures"`
	Waiters      int    `json:"waiters"`
	Wait         struct {
		Count int64   `json:"count"`
		Sum   float64 `json:"sum_seconds"`
	} `json:"wait"`
	Redis *struct {
		Owner   string `json:"owner"`
		Lease   string `json:"lease"`
		Foreign bool   `json:"foreign"`
	} `json:"redis_holder"`
	Recent []struct {
		Type     string  `json:"type"`
		Owner    string  `json:"owner"`
		Lease    string  `json:"lease"`
		Reason   string  `json:"reason"`
		Holder   string  `json:"holder"`
		Attempts int     `json:"attempts"`
		TTL      float64 `json:"ttl_seconds"`
		Wait     float64 `json:"wait_seconds"`
		Headroom float64 `json:"headroom_seconds"`
		By       string  `json:"by"`
	} `json:"recent"`
	WaitersNow []WaiterJSON `json:"waiters_now"`
}

type WaiterJSON struct {
	Owner   string   `json:"owner"`
	Lease   string   `json:"lease"`
	Holder  string   `json:"holder_seen"`
	Holds   []string `json:"holds_leases"`
	Waiting float64  `json:"waiting_seconds"`
}

// Incident is what the tests read of GET /api/v1/incidents.
type Incident struct {
	Kind    string   `json:"kind"`
	Keys    []string `json:"keys"`
	Owners  []string `json:"owners"`
	EndedBy string   `json:"ended_by"`
}

func (s *Serve) Incidents() []Incident {
	s.t.Helper()
	var v struct{ Incidents []Incident }
	s.Get("/api/v1/incidents", &v)
	return v.Incidents
}

// Lock reads key's detail. A key none of whose events serve has applied
// yet is a 404 to a viewer (no oracle for what Redis holds): that reads as
// an empty detail, so a caller polling for the key's events keeps polling.
func (s *Serve) Lock(key string) LockDetail {
	s.t.Helper()
	var d LockDetail
	path := "/api/v1/locks/" + url.PathEscape(key)
	resp, err := http.Get(s.URL(path))
	if err != nil {
		s.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return d
	}
	s.Get(path, &d)
	return d
}

// RecentSteps lists a key's recent events, oldest first, as "type owner"
// (plus ":reason" and " holder" when set).
func (d LockDetail) RecentSteps() []string {
	var out []string
	for i := len(d.Recent) - 1; i >= 0; i-- {
		e := d.Recent[i]
		s := e.Type + " " + e.Owner
		if e.Reason != "" {
			s += ":" + e.Reason
		}
		if e.Holder != "" {
			s += " <- " + e.Holder
		}
		out = append(out, s)
	}
	return out
}
