package alerts

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/lockscope/lockscope/test/promqltest"
)

const rulesFile = "lockscope.rules.yml"

// wantAlerts are DESIGN.md's alerts, in file order.
var wantAlerts = []string{
	"LockStuck", "LockWithoutExpiry", "LockExpiringFrequently", "LockWaitHigh", "LockAcquireFailuresHigh", "LockOwnershipFlapping",
	"LockDeadlock", "LockWaitQueueBuilding", "LockLeaseAtRisk", "LockOrderInversion", "LockHoldersOverlap",
	"LockscopeDown", "LockscopeEventsStale", "LockscopeStreamLagging", "LockscopeEventsDropped",
}

const runbookBase = "https://github.com/lockscope/lockscope/blob/main/docs/runbook.md#"

func alertRules(f promqltest.RuleFile) []promqltest.Rule {
	var out []promqltest.Rule
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				out = append(out, r)
			}
		}
	}
	return out
}

func testFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("tests", "*.yml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("Glob(tests/*.yml) = %v, %v, want test files", files, err)
	}
	return files
}

func TestRulesCheck(t *testing.T) {
	f := promqltest.ReadRules(t, rulesFile)
	n := 0
	for _, g := range f.Groups {
		n += len(g.Rules)
	}
	out, err := promqltest.Run(t, "", "promtool", "check", "rules", rulesFile)
	if err != nil {
		t.Fatalf("promtool check rules %s = %v\n%s", rulesFile, err, out)
	}
	if want := "SUCCESS: " + strconv.Itoa(n) + " rules found"; !strings.Contains(out, want) {
		t.Errorf("promtool check rules output = %q, want it to contain %q", out, want)
	}
}

func TestRulesUnit(t *testing.T) {
	files := testFiles(t)
	out, err := promqltest.Run(t, "", "promtool", append([]string{"test", "rules"}, files...)...)
	if err != nil {
		t.Fatalf("promtool test rules = %v\n%s", err, out)
	}
	if got := strings.Count(out, "SUCCESS"); got != len(files) {
		t.Errorf("promtool test rules: %d SUCCESS lines for %d files:\n%s", got, len(files), out)
	}
}

func TestAlertsConventions(t *testing.T) {
	f := promqltest.ReadRules(t, rulesFile)
	runbook, err := os.ReadFile(filepath.Join("..", "docs", "runbook.md"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range alertRules(f) {
		names = append(names, r.Alert)
		if sev := r.Labels["severity"]; sev != "critical" && sev != "warning" {
			t.Errorf("%s: severity = %q, want critical or warning", r.Alert, sev)
		}
		if r.For == "" {
			t.Errorf("%s: no for:, want one (tests check its boundary)", r.Alert)
		}
		for _, a := range []string{"summary", "description", "runbook_url"} {
			if r.Annotations[a] == "" {
				t.Errorf("%s: annotation %s is empty", r.Alert, a)
			}
		}
		// LockscopeDown's value is only up's 0 or absent()'s 1: nothing to show.
		if d := r.Annotations["description"]; r.Alert != "LockscopeDown" && !strings.Contains(d, "{{ $value | humanize") && !strings.Contains(d, "{{ $value | humanizeDuration") {
			t.Errorf("%s: description %q does not show the humanized {{ $value }}", r.Alert, d)
		}
		// Lock* alerts are per class (but a deadlock and a lock-order
		// inversion span classes); Lockscope* alerts are about lockscope.
		if !strings.HasPrefix(r.Alert, "Lockscope") && r.Alert != "LockDeadlock" && r.Alert != "LockOrderInversion" {
			if d := r.Annotations["description"]; !strings.Contains(d, "{{ $labels.class }}") {
				t.Errorf("%s: description %q does not name {{ $labels.class }}", r.Alert, d)
			}
			if !strings.Contains(r.Expr, "class") {
				t.Errorf("%s: expr %q does not keep the class label", r.Alert, r.Expr)
			}
		}
		anchor := strings.ToLower(r.Alert)
		if got, want := r.Annotations["runbook_url"], runbookBase+anchor; got != want {
			t.Errorf("%s: runbook_url = %q, want %q", r.Alert, got, want)
		}
		if !regexp.MustCompile(`(?m)^## ` + r.Alert + `$`).Match(runbook) {
			t.Errorf("docs/runbook.md has no section %q for the anchor #%s", "## "+r.Alert, anchor)
		}
	}
	if !slices.Equal(names, wantAlerts) {
		t.Errorf("alerts = %v, want %v", names, wantAlerts)
	}
	level := regexp.MustCompile(`^[a-z_]+:lockscope_[a-z0-9_]+:[a-z0-9_]+$`)
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Record != "" && !level.MatchString(r.Record) {
				t.Errorf("recording rule %q does not follow level:metric:operations", r.Record)
			}
		}
	}
}

// unitTests is the part of a promtool test file these checks read.
type unitTests struct {
	GroupEvalOrder []string `yaml:"group_eval_order"`
	Tests          []struct {
		Name          string `yaml:"name"`
		AlertRuleTest []struct {
			EvalTime  string `yaml:"eval_time"`
			Alertname string `yaml:"alertname"`
			ExpAlerts []struct {
				ExpLabels      map[string]string `yaml:"exp_labels"`
				ExpAnnotations map[string]string `yaml:"exp_annotations"`
			} `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

// TestUnitTestsCoverEveryAlert checks that the promtool tests have, for
// every alert, a case where it fires with its severity and all three
// annotations, and one where it stays quiet.
func TestUnitTestsCoverEveryAlert(t *testing.T) {
	fires := map[string]bool{}
	quiet := map[string]bool{}
	severity := map[string]string{}
	rules := promqltest.ReadRules(t, rulesFile)
	for _, r := range alertRules(rules) {
		severity[r.Alert] = r.Labels["severity"]
	}
	var groups []string
	for _, g := range rules.Groups {
		groups = append(groups, g.Name)
	}
	for _, file := range testFiles(t) {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var u unitTests
		if err := yaml.Unmarshal(b, &u); err != nil {
			t.Fatalf("parse %s: %v", file, err)
		}
		// Without it promtool evaluates groups in random order and alerts
		// reading recorded series pass or fail by chance.
		if !slices.Equal(u.GroupEvalOrder, groups) {
			t.Errorf("%s: group_eval_order = %v, want the rule file's groups %v", file, u.GroupEvalOrder, groups)
		}
		for _, tc := range u.Tests {
			for _, a := range tc.AlertRuleTest {
				if len(a.ExpAlerts) == 0 {
					quiet[a.Alertname] = true
				}
				for _, e := range a.ExpAlerts {
					if e.ExpLabels["severity"] != severity[a.Alertname] {
						t.Errorf("%s %q at %s: severity %q, want %q", file, tc.Name, a.EvalTime, e.ExpLabels["severity"], severity[a.Alertname])
					}
					if len(e.ExpAnnotations) != 3 {
						t.Errorf("%s %q at %s: %d annotations expected, want all 3 checked", file, tc.Name, a.EvalTime, len(e.ExpAnnotations))
					}
					fires[a.Alertname] = true
				}
			}
		}
	}
	for _, a := range wantAlerts {
		if !fires[a] {
			t.Errorf("no promtool test case where %s fires", a)
		}
		if !quiet[a] {
			t.Errorf("no promtool test case where %s stays quiet", a)
		}
	}
}

// TestUnitTestsPinForBoundary proves the boundary cases: with any one
// alert's "for:" a minute shorter or longer, its promtool tests must fail.
func TestUnitTestsPinForBoundary(t *testing.T) {
	orig := promqltest.ReadRules(t, rulesFile)
	tests := map[string][]byte{}
	for _, f := range testFiles(t) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		tests[filepath.Base(f)] = b
	}
	for gi, g := range orig.Groups {
		for ri, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			t.Run(r.Alert, func(t *testing.T) {
				t.Parallel()
				for _, delta := range []int{-1, +1} {
					// The mutated rule file in a temporary tree, with the
					// test files that test this alert next to it.
					dir := t.TempDir()
					mutated := cloneRules(orig)
					mutated.Groups[gi].Rules[ri].For = shiftFor(t, r.For, delta)
					promqltest.WriteRules(t, filepath.Join(dir, rulesFile), mutated)
					if err := os.Mkdir(filepath.Join(dir, "tests"), 0o755); err != nil {
						t.Fatal(err)
					}
					args := []string{"test", "rules"}
					for name, b := range tests {
						if !bytes.Contains(b, []byte("alertname: "+r.Alert+"\n")) {
							continue
						}
						dst := filepath.Join(dir, "tests", name)
						if err := os.WriteFile(dst, b, 0o644); err != nil {
							t.Fatal(err)
						}
						args = append(args, dst)
					}
					out, err := promqltest.Run(t, "", "promtool", args...)
					if err == nil {
						t.Errorf("%s with for: %s instead of %s: promtool test rules passed, want a failing boundary case", r.Alert, shiftFor(t, r.For, delta), r.For)
					} else if !strings.Contains(out, "alertname: "+r.Alert+",") {
						t.Errorf("%s with for changed: promtool failed elsewhere:\n%s", r.Alert, out)
					}
				}
			})
		}
	}
}

func cloneRules(f promqltest.RuleFile) promqltest.RuleFile {
	out := promqltest.RuleFile{Groups: slices.Clone(f.Groups)}
	for i := range out.Groups {
		out.Groups[i].Rules = slices.Clone(out.Groups[i].Rules)
	}
	return out
}

// shiftFor moves a for: duration by delta steps: minutes for "Nm", 15
// seconds (the tests' evaluation interval for such alerts) for "Ns".
func shiftFor(t *testing.T, d string, delta int) string {
	t.Helper()
	if m, ok := strings.CutSuffix(d, "m"); ok {
		if n, err := strconv.Atoi(m); err == nil {
			return strconv.Itoa(n+delta) + "m"
		}
	}
	if sec, ok := strings.CutSuffix(d, "s"); ok {
		if n, err := strconv.Atoi(sec); err == nil && n%15 == 0 {
			return strconv.Itoa(n+15*delta) + "s"
		}
	}
	t.Fatalf("for: %q is neither whole minutes nor a multiple of 15 seconds", d)
	return ""
}

// TestRuleMetricsAreExported checks every metric the rules read against
// what the collector exports after a scripted run, and every recorded
// series they read against the recording rules.
func TestRuleMetricsAreExported(t *testing.T) {
	f := promqltest.ReadRules(t, rulesFile)
	recorded := map[string]bool{}
	var exprs []promqltest.Expr
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				recorded[r.Record] = true
			}
			exprs = append(exprs, promqltest.Expr{Where: rulesFile + ": " + r.Record + r.Alert, Expr: r.Expr})
		}
	}
	promqltest.CheckExported(t, exprs, promqltest.Exported(t), recorded)
}
