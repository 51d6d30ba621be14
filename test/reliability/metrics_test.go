package reliability

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/lockscope/lockscope/collector/promexport"
	"github.com/lockscope/lockscope/collector/state"
)

// families is one scrape, by metric name.
type families map[string]*dto.MetricFamily

// gather collects g into families.
func gather(t testing.TB, g prometheus.Gatherer) families {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	out := make(families, len(mfs))
	for _, mf := range mfs {
		out[mf.GetName()] = mf
	}
	return out
}

// scrape GETs url (a /metrics endpoint) and parses the text exposition with
// the Prometheus parser, failing t if it is not valid.
func scrape(ctx context.Context, url string) (families, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, body, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return nil, body, fmt.Errorf("parse exposition of %s: %w", url, err)
	}
	return families(mfs), body, nil
}

// sum adds the values of every series of name whose labels include match
// (label name to value). Counters, gauges and untyped series count.
func (f families) sum(name string, match ...string) float64 {
	mf := f[name]
	if mf == nil {
		return 0
	}
	var total float64
	for _, m := range mf.GetMetric() {
		if !hasLabels(m, match) {
			continue
		}
		switch {
		case m.Counter != nil:
			total += m.Counter.GetValue()
		case m.Gauge != nil:
			total += m.Gauge.GetValue()
		case m.Untyped != nil:
			total += m.Untyped.GetValue()
		}
	}
	return total
}

func hasLabels(m *dto.Metric, match []string) bool {
	for i := 0; i+1 < len(match); i += 2 {
		found := false
		for _, lp := range m.GetLabel() {
			if lp.GetName() == match[i] && lp.GetValue() == match[i+1] {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// newAggregator returns an aggregator registered on a fresh registry.
func newAggregator(t testing.TB, cfg state.Config) (*state.Aggregator, *prometheus.Registry) {
	t.Helper()
	metrics := promexport.New()
	cfg.Metrics = metrics
	agg := state.New(cfg)
	reg := prometheus.NewRegistry()
	if err := metrics.Register(reg, agg); err != nil {
		t.Fatal(err)
	}
	return agg, reg
}
