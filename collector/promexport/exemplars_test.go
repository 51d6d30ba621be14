package promexport

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/lockscope/lockscope/collector/internal/evtest"
	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/event"
)

// The wait and hold of a traced call carry its trace id as an exemplar on
// the bucket they fall in; untraced observations none. The OpenMetrics
// exposition shows them; the metrics still lint clean.
func TestExemplars(t *testing.T) {
	a, clk, m := newTestState(t, state.Config{})
	m.now = clk.Now // paces the exemplars
	reg := prometheus.NewPedanticRegistry()
	if err := m.Register(reg, a); err != nil {
		t.Fatal(err)
	}
	waitTrace := event.TraceID{0: 0xab, 15: 1}
	holdTrace := event.TraceID{0: 0xcd, 15: 2}
	ms := time.Millisecond
	traced := func(e event.Event, tr event.TraceID) event.Event {
		e.TraceID, e.SpanID = tr, event.SpanID{7: 1}
		return e
	}
	clk.Set(evtest.T0.Add(time.Second))
	a.Apply([]event.Event{
		traced(evtest.Acquired("inventory:sku-1", "api", "L1", 0, 3*ms, 4, 10*time.Second), waitTrace),      // wait in (2.5, 5] ms
		traced(evtest.Acquired("inventory:sku-2", "api", "L2", 0, 40*ms, 2, 10*time.Second), holdTrace),     // wait in (25, 50] ms
		evtest.Acquired("inventory:sku-3", "api", "L3", 0, 200*ms, 2, 10*time.Second),                       // untraced: (100, 250] ms
		traced(evtest.Ended(event.Released, "inventory:sku-2", "api", "L2", 700*ms, 700*ms, ""), holdTrace), // hold in (0.5, 1] s
		evtest.Ended(event.Released, "inventory:sku-3", "api", "L3", 20*ms, 20*ms, ""),                      // untraced hold
	})

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	exemplars := func(name string) map[float64]string { // bucket bound -> trace_id
		out := map[float64]string{}
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
			for _, mt := range mf.GetMetric() {
				for _, b := range mt.GetHistogram().GetBucket() {
					if ex := b.GetExemplar(); ex != nil {
						out[b.GetUpperBound()] = exemplarLabelOf(ex, "trace_id")
					}
				}
			}
		}
		return out
	}
	wantWait := map[float64]string{.005: waitTrace.String(), .05: holdTrace.String()}
	if got := exemplars("lockscope_wait_seconds"); !equalMaps(got, wantWait) {
		t.Errorf("wait exemplars by bucket %v, want %v", got, wantWait)
	}
	wantHold := map[float64]string{1: holdTrace.String()}
	if got := exemplars("lockscope_hold_seconds"); !equalMaps(got, wantHold) {
		t.Errorf("hold exemplars by bucket %v, want %v", got, wantHold)
	}

	// A bucket takes a new exemplar at most every exemplarEvery: another
	// traced wait in the 5 ms bucket right away keeps the first, one a
	// second later replaces it; a quiet bucket takes one at once.
	paced := event.TraceID{0: 0xef, 15: 3}
	later := event.TraceID{0: 0xef, 15: 4}
	a.Apply([]event.Event{
		traced(evtest.Acquired("inventory:sku-4", "api", "L4", 0, 4*ms, 2, 10*time.Second), paced),
		traced(evtest.Acquired("inventory:sku-5", "api", "L5", 0, 4*time.Second, 2, 10*time.Second), paced),
	})
	if mfs, err = reg.Gather(); err != nil {
		t.Fatal(err)
	}
	wantWait = map[float64]string{.005: waitTrace.String(), .05: holdTrace.String(), 5: paced.String()}
	if got := exemplars("lockscope_wait_seconds"); !equalMaps(got, wantWait) {
		t.Errorf("wait exemplars after a second traced wait in one bucket within %v: %v, want %v", exemplarEvery, got, wantWait)
	}
	clk.Add(exemplarEvery)
	a.Apply([]event.Event{traced(evtest.Acquired("inventory:sku-6", "api", "L6", 0, 4*ms, 2, 10*time.Second), later)})
	if mfs, err = reg.Gather(); err != nil {
		t.Fatal(err)
	}
	wantWait[.005] = later.String()
	if got := exemplars("lockscope_wait_seconds"); !equalMaps(got, wantWait) {
		t.Errorf("wait exemplars %v later: %v, want %v", exemplarEvery, got, wantWait)
	}
	if n := testutil.CollectAndCount(m.wait, "lockscope_wait_seconds"); n != 1 {
		t.Errorf("%d wait series, want 1", n)
	}

	// Served as /metrics is (cmd/lockscope/internal/cli): OpenMetrics when asked for,
	// with the exemplars; the classic text format otherwise, without.
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg, EnableOpenMetrics: true}))
	defer srv.Close()
	om := scrape(t, srv.URL, "application/openmetrics-text;version=1.0.0")
	line := regexp.MustCompile(`(?m)^lockscope_wait_seconds_bucket\{class="inventory:sku-\*",le="0\.005"\} 3 # \{trace_id="` + later.String() + `"\} 0\.004 [0-9.e+]+$`)
	if !line.MatchString(om) {
		t.Errorf("OpenMetrics exposition lacks the wait exemplar line; wait buckets:\n%s", grep(om, "lockscope_wait_seconds_bucket"))
	}
	if !strings.HasSuffix(om, "# EOF\n") {
		t.Errorf("OpenMetrics exposition does not end in # EOF")
	}
	if plain := scrape(t, srv.URL, "text/plain"); strings.Contains(plain, "trace_id") {
		t.Errorf("the classic text format shows exemplars; it has no syntax for them")
	}

	problems, err := testutil.CollectAndLint(m.wait, "lockscope_wait_seconds")
	if err != nil || len(problems) > 0 {
		t.Errorf("lint of lockscope_wait_seconds: %v %v", problems, err)
	}
}

func exemplarLabelOf(ex *dto.Exemplar, name string) string {
	for _, l := range ex.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func equalMaps(a, b map[float64]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func scrape(t *testing.T, url, accept string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("Accept", accept)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func grep(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
