package grafana

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockscope/lockscope/test/promqltest"
)

// panelExpr is the first query of the panel titled title, with Grafana's
// variables set to match every series.
func panelExpr(t *testing.T, title string) string {
	t.Helper()
	vars := strings.NewReplacer("$__rate_interval", "5m", "$job", ".+", "$instance", ".+", "$class", ".+")
	for _, d := range loadDashboards(t) {
		for _, p := range d.allPanels() {
			if p.Title == title && len(p.Targets) > 0 {
				return vars.Replace(p.Targets[0].Expr)
			}
		}
	}
	t.Fatalf("no panel %q", title)
	return ""
}

// The contention ratio panels leave passive classes out: their waits cannot
// be seen, so their contention is unknown, not 0. Library locks at 75 %
// beside a busier passive class read 75 %, not the 30 % of counting the
// passive acquisitions as uncontended. Evaluated by promtool.
func TestContentionRatioLeavesPassiveClassesOut(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "empty.yml"), []byte("groups: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) } // YAML accepts JSON strings
	series := func(name, class, values string) string {
		return "      - series: " + q(name+`{class="`+class+`", job="lockscope", instance="a:8080"}`) + "\n        values: " + q(values) + "\n"
	}
	test := "rule_files: [empty.yml]\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:\n" +
		// Library locks: 32 acquisitions a minute, 24 of them waited.
		series("lockscope_acquisitions_total", "orders:*", "0+32x10") +
		series("lockscope_contentions_total", "orders:*", "0+24x10") +
		series("lockscope_wait_seconds_count", "orders:*", "0+32x10") +
		// Passive locks: 48 acquisitions a minute, waits never seen.
		series("lockscope_acquisitions_total", "lock:*", "0+48x10") +
		series("lockscope_contentions_total", "lock:*", "0x10") +
		"    promql_expr_test:\n" +
		"      - expr: " + q(panelExpr(t, "Contention ratio")) + "\n        eval_time: 10m\n        exp_samples:\n          - labels: '{}'\n            value: 0.75\n" +
		"      - expr: " + q(panelExpr(t, "Contention ratio by class")) + "\n        eval_time: 10m\n        exp_samples:\n          - labels: '{class=\"orders:*\"}'\n            value: 0.75\n"
	if err := os.WriteFile(filepath.Join(dir, "test.yml"), []byte(test), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := promqltest.Run(t, dir, "promtool", "test", "rules", "test.yml")
	if err != nil || !strings.Contains(out, "SUCCESS") {
		t.Errorf("promtool test rules of the contention panels = %v\n%s", err, out)
	}
}

// The stuck and no-expiry panels link to lockscope's lists (variable
// lockscope_url): the panel to the whole list, each class to its own.
func TestStuckAndNoExpiryPanelsLinkToLockscope(t *testing.T) {
	want := map[string]string{"lockscope_stuck_locks": "stuck", "lockscope_locks_without_expiry": "no-expiry"}
	found := map[string]bool{}
	for _, d := range loadDashboards(t) {
		for _, p := range d.allPanels() {
			if p.Type != "table" || len(p.Targets) == 0 {
				continue
			}
			for metric, state := range want {
				if !strings.Contains(p.Targets[0].Expr, metric) {
					continue
				}
				found[metric] = true
				var urls []string
				for _, o := range p.FieldConfig.Overrides {
					for _, prop := range o.Properties {
						var links []struct{ URL string }
						if o.Matcher.Options == "class" && prop.ID == "links" && json.Unmarshal(prop.Value, &links) == nil {
							for _, l := range links {
								urls = append(urls, l.URL)
							}
						}
					}
				}
				wantURL := "${lockscope_url}/keys?state=" + state + "&class=${__data.fields.class:percentencode}"
				if len(urls) != 1 || urls[0] != wantURL {
					t.Errorf("%s: panel %q class links %q, want [%q]", d.path, p.Title, urls, wantURL)
				}
				if len(p.Links) != 1 || p.Links[0].URL != "${lockscope_url}/keys?state="+state {
					t.Errorf("%s: panel %q links %+v, want one to ${lockscope_url}/keys?state=%s", d.path, p.Title, p.Links, state)
				}
			}
		}
	}
	for metric := range want {
		if !found[metric] {
			t.Errorf("no table panel of %s", metric)
		}
	}
}
