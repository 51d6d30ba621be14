package promqltest

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
)

func TestNames(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{`sum by (class) (rate(lockscope_acquisitions_total{class=~"$class"}[5m]))`, []string{"lockscope_acquisitions_total"}},
		{`histogram_quantile(0.99, sum by (class, le) (rate(lockscope_wait_seconds_bucket[5m])))`, []string{"lockscope_wait_seconds_bucket"}},
		{`class:lockscope_wait_seconds:p99_rate5m > 5 and class:lockscope_acquisitions:rate5m > 0.05`,
			[]string{"class:lockscope_acquisitions:rate5m", "class:lockscope_wait_seconds:p99_rate5m"}},
		// Label values are not names, whatever they look like.
		{`lockscope_hot_key_contentions{key!="lockscope_fake_total", class='a:b:c'}`, []string{"lockscope_hot_key_contentions"}},
		{`up{job="lockscope"} == 0 or absent(up{job="lockscope"})`, []string{}},
	} {
		if got := Names(tc.expr); !slices.Equal(got, tc.want) {
			t.Errorf("Names(%q) = %q, want %q", tc.expr, got, tc.want)
		}
	}
}

// errRecorder records Errorf calls instead of failing.
type errRecorder struct {
	testing.TB
	errs []string
}

func (r *errRecorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

func TestCheckExported(t *testing.T) {
	exported := map[string]dto.MetricType{
		"lockscope_acquisitions_total": dto.MetricType_COUNTER,
		"lockscope_wait_seconds":       dto.MetricType_HISTOGRAM,
		"lockscope_held_locks":         dto.MetricType_GAUGE,
	}
	recorded := map[string]bool{"class:lockscope_acquisitions:rate5m": true}
	r := &errRecorder{TB: t}
	CheckExported(r, []Expr{
		{"ok", `rate(lockscope_acquisitions_total[5m]) + rate(lockscope_wait_seconds_count[5m]) + class:lockscope_acquisitions:rate5m`},
		{"typo", `lockscope_acquisition_total`},
		{"gauge is no histogram", `lockscope_held_locks_count`},
		{"unrecorded", `class:lockscope_nope:rate5m`},
	}, exported, recorded)
	want := []string{"typo: lockscope_acquisition_total", "gauge is no histogram: lockscope_held_locks_count", "unrecorded: class:lockscope_nope:rate5m"}
	if len(r.errs) != len(want) {
		t.Fatalf("CheckExported errors = %q, want %d errors", r.errs, len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(r.errs[i], w) {
			t.Errorf("CheckExported error %d = %q, want it to start with %q", i, r.errs[i], w)
		}
	}
}

func TestCheckParseAcceptsValid(t *testing.T) {
	CheckParse(t, []Expr{{"valid", `sum by (class) (rate(lockscope_acquisitions_total{class=~"(a:\\*|b)"}[1m]))`}})
}

func TestExportedHasEveryDesignedMetric(t *testing.T) {
	got := Exported(t)
	// The metric table of DESIGN.md.
	for name, typ := range map[string]dto.MetricType{
		"lockscope_acquisitions_total": dto.MetricType_COUNTER, "lockscope_contentions_total": dto.MetricType_COUNTER,
		"lockscope_acquire_failures_total": dto.MetricType_COUNTER, "lockscope_wait_seconds": dto.MetricType_HISTOGRAM,
		"lockscope_hold_seconds": dto.MetricType_HISTOGRAM, "lockscope_releases_total": dto.MetricType_COUNTER,
		"lockscope_expirations_total": dto.MetricType_COUNTER, "lockscope_renewal_failures_total": dto.MetricType_COUNTER,
		"lockscope_forced_releases_total": dto.MetricType_COUNTER, "lockscope_handoffs_total": dto.MetricType_COUNTER,
		"lockscope_held_locks": dto.MetricType_GAUGE, "lockscope_waiters": dto.MetricType_GAUGE,
		"lockscope_stuck_locks": dto.MetricType_GAUGE, "lockscope_oldest_hold_start_timestamp_seconds": dto.MetricType_GAUGE,
		"lockscope_hot_key_contentions": dto.MetricType_GAUGE, "lockscope_events_total": dto.MetricType_COUNTER,
		"lockscope_events_malformed_total": dto.MetricType_COUNTER, "lockscope_events_dropped_total": dto.MetricType_COUNTER,
		"lockscope_last_event_timestamp_seconds": dto.MetricType_GAUGE, "lockscope_stream_lag_entries": dto.MetricType_GAUGE,
		"lockscope_stream_pending_entries":   dto.MetricType_GAUGE,
		"lockscope_renewal_headroom_seconds": dto.MetricType_HISTOGRAM, "lockscope_incidents_total": dto.MetricType_COUNTER, "lockscope_renewal_headroom_ratio": dto.MetricType_HISTOGRAM,
	} {
		if g, ok := got[name]; !ok || g != typ {
			t.Errorf("Exported()[%s] = %v, %v, want %v", name, g, ok, typ)
		}
	}
}
