package main

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/lockscope/lockscope/test/promqltest"
)

type exemplarSeries struct {
	SeriesLabels map[string]string `json:"seriesLabels"`
	Exemplars    []struct {
		Labels    map[string]string `json:"labels"`
		Value     string            `json:"value"`
		Timestamp float64           `json:"timestamp"`
	} `json:"exemplars"`
}

// TestPrometheusKeepsWaitExemplars runs a real Prometheus with exemplar
// storage scraping `serve` while `load` runs: the load's simulated work
// runs in traces, so the wait and hold histograms' buckets carry trace ids
// as exemplars (OpenMetrics, which Prometheus asks for), and Prometheus
// keeps them (GET /api/v1/query_exemplars).
func TestPrometheusKeepsWaitExemplars(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	env := []string{"LOCKSCOPE_REDIS_URL=" + srv.URL(), "LOCKSCOPE_STREAM=exemplars:events"}
	base, _ := serveReady(t, env)

	dir := t.TempDir()
	config := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 900ms
scrape_configs:
  - job_name: lockscope
    static_configs:
      - targets: [%q]
`, strings.TrimPrefix(base, "http://"))
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	prom := promqltest.StartServer(t, filepath.Join(dir, "prometheus.yml"), "--enable-feature=exemplar-storage")

	start := time.Now().Add(-time.Minute)
	stdout, stderr, code := lockscope(t, env, "", "load", "--duration", "4s", "--rate", "100", "--concurrency", "8", "--speed", "10")
	if code != 0 {
		t.Fatalf("lockscope load: exit %d\n%s\n%s", code, stdout, stderr)
	}

	for _, metric := range []string{"lockscope_wait_seconds_bucket", "lockscope_hold_seconds_bucket"} {
		var series []exemplarSeries
		redistest.WaitFor(t, time.Minute, "exemplars of "+metric+" in Prometheus", func() error {
			q := url.Values{"query": {metric}, "start": {strconv.FormatInt(start.Unix(), 10)},
				"end": {strconv.FormatInt(time.Now().Add(time.Minute).Unix(), 10)}}
			series = nil
			if err := prom.TryGet("/api/v1/query_exemplars?"+q.Encode(), &series); err != nil {
				return err
			}
			if len(series) == 0 {
				return fmt.Errorf("no exemplars of %s yet", metric)
			}
			return nil
		})
		n := 0
		for _, s := range series {
			if s.SeriesLabels["__name__"] != metric || s.SeriesLabels["job"] != "lockscope" || s.SeriesLabels["class"] == "" {
				t.Errorf("exemplars on series %v, want %s of job lockscope with a class", s.SeriesLabels, metric)
			}
			le, err := strconv.ParseFloat(s.SeriesLabels["le"], 64)
			if err != nil {
				t.Errorf("series %v: le: %v", s.SeriesLabels, err)
			}
			for _, x := range s.Exemplars {
				n++
				if len(x.Labels) != 1 {
					t.Errorf("exemplar labels %v, want trace_id only", x.Labels)
				}
				if tr, ok := event.ParseTraceID(x.Labels["trace_id"]); !ok || !tr.IsValid() {
					t.Errorf("exemplar trace_id %q, want 32 hex digits, not all zero", x.Labels["trace_id"])
				}
				v, err := strconv.ParseFloat(x.Value, 64)
				if err != nil || v < 0 || v > le {
					t.Errorf("exemplar value %q of bucket le=%v: want a duration in the bucket (%v)", x.Value, le, err)
				}
				if at := time.Unix(0, int64(x.Timestamp*1e9)); at.Before(start) || at.After(time.Now()) {
					t.Errorf("exemplar at %v, want during the test (from %v)", at, start)
				}
			}
		}
		t.Logf("%s: %d exemplars on %d series", metric, n, len(series))
	}
}
