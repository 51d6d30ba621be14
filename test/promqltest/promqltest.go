// Package promqltest checks lockscope's PromQL artifacts (the rule file and
// the Grafana dashboards) with the real Prometheus tools and against the
// metrics the collector really exports. It does not import the
// prometheus/prometheus module: promtool itself parses the expressions.
// It is test support for the alerts and grafana tests, hence internal.
//
// A missing tool is a test failure, never a skip: promtool and prometheus
// come with the Debian package prometheus, amtool with
// prometheus-alertmanager.
package promqltest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

// packages names the Debian package that provides each tool.
var packages = map[string]string{
	"promtool":   "prometheus",
	"prometheus": "prometheus",
	"amtool":     "prometheus-alertmanager",
}

// Binary returns the path of a Prometheus tool or fails tb saying how to
// install it.
func Binary(tb testing.TB, name string) string {
	tb.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		tb.Fatalf("%s not found in PATH: install it (apt-get install -y --no-install-recommends %s)", name, packages[name])
	}
	return p
}

// Run runs a Prometheus tool in dir ("" means the current directory) and
// returns its combined output and exit error. A run that hangs is stopped a
// little before the test binary's deadline (go test -timeout), so that the
// test fails with the tool's output instead of a dump of goroutines; no
// shorter bound, which a loaded host could reach (promtool takes 2 s here
// alone, and was killed by a 2-minute bound while the suite ran).
func Run(tb testing.TB, dir, name string, args ...string) (string, error) {
	tb.Helper()
	cmd := exec.CommandContext(redistest.Context(tb), Binary(tb, name), args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// RuleFile is the part of a Prometheus rule file the tests read.
type RuleFile struct {
	Groups []RuleGroup `yaml:"groups"`
}

// RuleGroup is one group of a rule file.
type RuleGroup struct {
	Name     string `yaml:"name"`
	Interval string `yaml:"interval,omitempty"`
	Rules    []Rule `yaml:"rules"`
}

// Rule is a recording or an alerting rule.
type Rule struct {
	Record      string            `yaml:"record,omitempty"`
	Alert       string            `yaml:"alert,omitempty"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for,omitempty"`
	Labels      map[string]string `yaml:"labels,omitempty"`
	Annotations map[string]string `yaml:"annotations,omitempty"`
}

// ReadRules parses a rule file.
func ReadRules(tb testing.TB, path string) RuleFile {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	var f RuleFile
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		tb.Fatalf("parse %s: %v", path, err)
	}
	return f
}

// WriteRules writes f as a rule file at path.
func WriteRules(tb testing.TB, path string, f RuleFile) {
	tb.Helper()
	b, err := yaml.Marshal(f)
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		tb.Fatal(err)
	}
}

// Expr is a PromQL expression and where it comes from, for messages.
type Expr struct {
	Where string
	Expr  string
}

// CheckParse fails tb for every expression promtool cannot parse. The
// expressions are written as recording rules into a temporary rule file and
// checked with one `promtool check rules` run, which names the failing rule.
func CheckParse(tb testing.TB, exprs []Expr) {
	tb.Helper()
	if len(exprs) == 0 {
		tb.Fatal("CheckParse: no expressions")
	}
	var f RuleFile
	g := RuleGroup{Name: "parse"}
	for i, e := range exprs {
		g.Rules = append(g.Rules, Rule{Record: fmt.Sprintf("parse_check_%d", i), Expr: e.Expr})
	}
	f.Groups = append(f.Groups, g)
	path := filepath.Join(tb.TempDir(), "exprs.rules.yml")
	WriteRules(tb, path, f)
	out, err := Run(tb, "", "promtool", "check", "rules", path)
	if err == nil && strings.Contains(out, fmt.Sprintf("SUCCESS: %d rules found", len(exprs))) {
		return
	}
	bad := regexp.MustCompile(`"parse_check_(\d+)"`).FindAllStringSubmatch(out, -1)
	for _, m := range bad {
		var i int
		fmt.Sscan(m[1], &i)
		tb.Errorf("%s: PromQL does not parse: %q", exprs[i].Where, exprs[i].Expr)
	}
	tb.Fatalf("promtool check rules = %v\n%s", err, out)
}

var (
	// identifier matches PromQL metric, function and label names, and
	// recording-rule names with colons.
	identifier = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	// quoted matches PromQL string literals, whose contents are label
	// values, not names.
	quoted = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'` + "|`[^`]*`")
)

// Names returns the lockscope metric names (lockscope_...) and the
// recording-rule names (level:metric:operations) that expr refers to, sorted
// and without duplicates.
func Names(expr string) []string {
	expr = quoted.ReplaceAllString(expr, `""`)
	seen := map[string]bool{}
	for _, id := range identifier.FindAllString(expr, -1) {
		if strings.HasPrefix(id, "lockscope_") || strings.Count(id, ":") == 2 {
			seen[id] = true
		}
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
