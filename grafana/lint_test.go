package grafana

import (
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The rules of Grafana's dashboard-linter (github.com/grafana/dashboard-linter,
// lint/rule_*.go), checked here because the linter publishes no module
// version the Go proxy serves. Each check names the rule it mirrors.

// validUnits is the linter's list of Grafana units, the ones used here and
// their close relatives.
var validUnits = []string{"none", "short", "percent", "percentunit", "ns", "µs", "ms", "s", "m", "h", "d",
	"dtdurationms", "dtdurations", "reqps", "ops", "cps", "rps", "wps", "bytes", "decbytes", "dateTimeFromNow"}

// selector finds every series selector of the dashboard's queries: a
// lockscope metric or up, with its matchers if any.
var selector = regexp.MustCompile(`\b(lockscope_[a-z_]+|up)\b(\{[^}]*\})?`)

// rangeFunc finds function calls over a range: fn(selector[range]).
var rangeFunc = regexp.MustCompile(`\b([a-z_]+)\(\s*(lockscope_[a-z_]+)(\{[^}]*\})?\[([^\]]+)\]`)

// counterFunc matches the end of the text before a counter that a function
// takes a rate or increase of.
var counterFunc = regexp.MustCompile(`\b(rate|irate|increase)\(\s*$`)

func TestDashboardLint(t *testing.T) {
	for _, d := range loadDashboards(t) {
		errorf := func(rule, format string, args ...any) {
			t.Helper()
			t.Errorf("%s: [%s] "+format, append([]any{d.path, rule}, args...)...)
		}
		// uneditable-dashboard
		if d.Editable {
			errorf("uneditable-dashboard", "is editable, want editable: false (provisioned: changes belong in the JSON)")
		}
		// template-datasource-rule
		var dsVars int
		for _, v := range d.Templating.List {
			if v.Type == "datasource" {
				dsVars++
				if v.Name != "datasource" || string(v.Query) != `"prometheus"` || v.Label != "Data source" {
					errorf("template-datasource-rule", "datasource variable %q (label %q, query %s), want datasource / Data source / prometheus", v.Name, v.Label, v.Query)
				}
			}
		}
		if dsVars != 1 {
			errorf("template-datasource-rule", "%d datasource variables, want 1", dsVars)
		}
		// template-job-rule, template-instance-rule
		for _, name := range []string{"job", "instance"} {
			v, ok := d.variable(name)
			if !ok {
				errorf("template-"+name+"-rule", "is missing the %s variable", name)
				continue
			}
			if v.Type != "query" || v.Datasource == nil || v.Datasource.UID != "${datasource}" || !v.Multi || v.AllValue != ".+" ||
				v.Label != strings.ToUpper(name[:1])+name[1:] {
				errorf("template-"+name+"-rule", "%s variable %+v, want a multi-select query on ${datasource}, allValue .+, labelled %q", name, v, strings.ToUpper(name[:1])+name[1:])
			}
		}
		// template-on-time-change-reload-rule
		for _, v := range d.Templating.List {
			if v.Type == "query" && v.Refresh != 2 {
				errorf("template-on-time-change-reload-rule", "variable %s refreshes %d, want 2 (on time range change)", v.Name, v.Refresh)
			}
		}
		for _, p := range d.allPanels() {
			switch p.Type {
			case "row", "text":
				continue
			}
			// panel-title-description-rule
			if p.Title == "" || p.Description == "" {
				errorf("panel-title-description-rule", "panel %q has no title or description", p.Title)
			}
			// panel-datasource-rule
			if p.Datasource == nil || (p.Datasource.UID != "${datasource}" && p.Datasource.UID != "$datasource") {
				errorf("panel-datasource-rule", "panel %q uses datasource %+v, want ${datasource}", p.Title, p.Datasource)
			}
			// panel-units-rule (not tables; value mappings exempt)
			if p.Type != "table" && len(p.FieldConfig.Defaults.Mappings) <= 2 && !slices.Contains(validUnits, p.FieldConfig.Defaults.Unit) {
				errorf("panel-units-rule", "panel %q has unit %q, want a Grafana unit", p.Title, p.FieldConfig.Defaults.Unit)
			}
			// panel-no-targets-rule
			if len(p.Targets) == 0 {
				errorf("panel-no-targets-rule", "panel %q has no queries", p.Title)
			}
			for _, tg := range p.Targets {
				// target-job-rule, target-instance-rule
				found := selector.FindAllStringSubmatch(tg.Expr, -1)
				if len(found) == 0 {
					errorf("target-job-rule", "panel %q query %s selects no series: %q", p.Title, tg.RefID, tg.Expr)
				}
				for _, m := range found {
					if !strings.Contains(m[2], `job=~"$job"`) || !strings.Contains(m[2], `instance=~"$instance"`) {
						errorf("target-job-rule", "panel %q query %s: selector %s lacks job=~\"$job\" and instance=~\"$instance\"", p.Title, tg.RefID, m[0])
					}
				}
				// target-rate-interval-rule, target-counter-agg-rule
				for _, m := range rangeFunc.FindAllStringSubmatch(tg.Expr, -1) {
					if (m[1] == "rate" || m[1] == "irate") && m[4] != "$__rate_interval" {
						errorf("target-rate-interval-rule", "panel %q query %s: %s over [%s], want [$__rate_interval]", p.Title, tg.RefID, m[1], m[4])
					}
				}
				for _, m := range selector.FindAllStringSubmatchIndex(tg.Expr, -1) {
					name := tg.Expr[m[2]:m[3]]
					if !strings.HasSuffix(name, "_total") {
						continue
					}
					before, after := tg.Expr[:m[2]], tg.Expr[m[1]:]
					if !strings.HasPrefix(after, "[") || !counterFunc.MatchString(before) {
						errorf("target-counter-agg-rule", "panel %q query %s: counter %s is not inside rate, irate or increase", p.Title, tg.RefID, name)
					}
				}
			}
		}
	}
}
