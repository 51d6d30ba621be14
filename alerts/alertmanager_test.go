package alerts

import (
	"bytes"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/lockscope/lockscope/test/promqltest"
)

const alertmanagerFile = "alertmanager.yml"

func TestAlertmanagerCheckConfig(t *testing.T) {
	out, err := promqltest.Run(t, "", "amtool", "check-config", alertmanagerFile)
	if err != nil {
		t.Fatalf("amtool check-config %s = %v\n%s", alertmanagerFile, err, out)
	}
	for _, want := range []string{"SUCCESS", "2 inhibit rules", "2 receivers"} {
		if !strings.Contains(out, want) {
			t.Errorf("amtool check-config output = %q, want it to contain %q", out, want)
		}
	}
}

// TestAlertmanagerRoutesBySeverity asks amtool where each alert of the rule
// file, with its own labels, is routed: critical pages, warning chats.
func TestAlertmanagerRoutesBySeverity(t *testing.T) {
	want := map[string]string{"critical": "pager", "warning": "chat"}
	for _, r := range alertRules(promqltest.ReadRules(t, rulesFile)) {
		sev := r.Labels["severity"]
		cmd := exec.Command(promqltest.Binary(t, "amtool"), "config", "routes", "test",
			"--config.file="+alertmanagerFile, "alertname="+r.Alert, "severity="+sev, "class=workflow:*")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("amtool config routes test %s = %v\n%s%s", r.Alert, err, stdout.String(), stderr.String())
		}
		if got := strings.TrimSpace(stdout.String()); got != want[sev] {
			t.Errorf("route of %s (severity %s) = %q, want %q", r.Alert, sev, got, want[sev])
		}
	}
}

// amConfig is the part of alertmanager.yml these checks read.
type amConfig struct {
	Receivers []struct {
		Name           string `yaml:"name"`
		WebhookConfigs []struct {
			URL string `yaml:"url"`
		} `yaml:"webhook_configs"`
	} `yaml:"receivers"`
	InhibitRules []struct {
		SourceMatchers []string `yaml:"source_matchers"`
		TargetMatchers []string `yaml:"target_matchers"`
		Equal          []string `yaml:"equal"`
	} `yaml:"inhibit_rules"`
}

func readAlertmanager(t *testing.T) amConfig {
	t.Helper()
	b, err := os.ReadFile(alertmanagerFile)
	if err != nil {
		t.Fatal(err)
	}
	var c amConfig
	if err := yaml.Unmarshal(b, &c); err != nil {
		t.Fatalf("parse %s: %v", alertmanagerFile, err)
	}
	return c
}

// TestAlertmanagerDownInhibitsTheRest checks that LockscopeDown's inhibit
// rule mutes every other alert of the rule file (matched as Alertmanager
// does: an anchored RE2 regexp) and never itself.
func TestAlertmanagerDownInhibitsTheRest(t *testing.T) {
	c := readAlertmanager(t)
	var target *regexp.Regexp
	for _, r := range c.InhibitRules {
		if len(r.SourceMatchers) == 1 && r.SourceMatchers[0] == `alertname="LockscopeDown"` {
			if len(r.TargetMatchers) != 1 || len(r.Equal) != 0 {
				t.Fatalf("LockscopeDown inhibit rule targets %v equal %v, want one alertname matcher and no equal", r.TargetMatchers, r.Equal)
			}
			re, ok := strings.CutPrefix(r.TargetMatchers[0], `alertname=~"`)
			re, ok2 := strings.CutSuffix(re, `"`)
			if !ok || !ok2 {
				t.Fatalf("LockscopeDown inhibit target %q, want alertname=~\"...\"", r.TargetMatchers[0])
			}
			target = regexp.MustCompile("^(?:" + re + ")$")
		}
	}
	if target == nil {
		t.Fatal(`no inhibit rule with source_matchers [alertname="LockscopeDown"]`)
	}
	for _, r := range alertRules(promqltest.ReadRules(t, rulesFile)) {
		if got, want := target.MatchString(r.Alert), r.Alert != "LockscopeDown"; got != want {
			t.Errorf("LockscopeDown inhibits %s = %v, want %v", r.Alert, got, want)
		}
	}
}

func TestAlertmanagerReceiversArePlaceholders(t *testing.T) {
	c := readAlertmanager(t)
	names := map[string]bool{}
	for _, r := range c.Receivers {
		names[r.Name] = true
		if len(r.WebhookConfigs) == 0 {
			t.Errorf("receiver %s has no webhook_configs", r.Name)
		}
		for _, w := range r.WebhookConfigs {
			u, err := url.Parse(w.URL)
			if err != nil || !strings.HasSuffix(u.Hostname(), ".example.com") {
				t.Errorf("receiver %s url %q, want a placeholder on an example.com host", r.Name, w.URL)
			}
		}
	}
	for _, want := range []string{"pager", "chat"} {
		if !names[want] {
			t.Errorf("no receiver %q", want)
		}
	}
}
