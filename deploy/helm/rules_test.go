package helm

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"sigs.k8s.io/yaml"
)

// The PrometheusRule carries exactly the rules of alerts/lockscope.rules.yml,
// and promtool accepts them as the Prometheus Operator hands them over.
func TestPrometheusRuleIsTheRulesFile(t *testing.T) {
	o := render(t, "lockscope", `prometheusRule: {labels: {release: kube-prometheus-stack}}`)
	if o.rule == nil {
		t.Fatal("no PrometheusRule rendered")
	}
	if o.rule.Labels["release"] != "kube-prometheus-stack" || o.rule.Namespace != namespace {
		t.Errorf("PrometheusRule labels %v namespace %q, want release=kube-prometheus-stack in %s", o.rule.Labels, o.rule.Namespace, namespace)
	}
	b, err := os.ReadFile(filepath.Join(root, "alerts", "lockscope.rules.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var want monitoringv1.PrometheusRuleSpec
	if err := yaml.UnmarshalStrict(b, &want); err != nil {
		t.Fatalf("alerts/lockscope.rules.yml does not decode strictly as a PrometheusRule spec: %v", err)
	}
	if diff := cmp.Diff(want, o.rule.Spec); diff != "" {
		t.Errorf("PrometheusRule spec differs from alerts/lockscope.rules.yml (-want +got):\n%s", diff)
	}
	var rules, alerts []string
	for _, g := range o.rule.Spec.Groups {
		for _, r := range g.Rules {
			rules = append(rules, r.Record+r.Alert)
			if r.Alert != "" {
				alerts = append(alerts, r.Alert)
			}
		}
	}
	for _, a := range []string{"LockStuck", "LockWaitHigh", "LockDeadlock", "LockscopeDown", "LockscopeEventsDropped"} {
		if !slices.Contains(alerts, a) {
			t.Errorf("alert %s missing from the PrometheusRule (has %v)", a, alerts)
		}
	}

	spec, err := yaml.Marshal(o.rule.Spec)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "rule.yml")
	if err := os.WriteFile(file, spec, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("promtool", "check", "rules", file).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules on the PrometheusRule's spec: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`SUCCESS: (\d+) rules found`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("promtool check rules said:\n%s", out)
	}
	if n, _ := strconv.Atoi(string(m[1])); n != len(rules) {
		t.Errorf("promtool found %d rules, the PrometheusRule has %d", n, len(rules))
	}
}

// The dashboards ConfigMap carries the sidecar's label and every dashboard
// of grafana/dashboards, unchanged.
func TestDashboardsConfigMap(t *testing.T) {
	o := render(t, "lockscope", "")
	cm := o.configMaps["lockscope-dashboards"]
	if cm == nil {
		t.Fatalf("no ConfigMap lockscope-dashboards; have %v", keys(o.configMaps))
	}
	if cm.Labels["grafana_dashboard"] != "1" || cm.Namespace != namespace {
		t.Errorf("labels %v namespace %q, want grafana_dashboard=1 in %s", cm.Labels, cm.Namespace, namespace)
	}
	files, err := filepath.Glob(filepath.Join(root, "grafana", "dashboards", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no dashboards: %v", err)
	}
	var names []string
	for _, f := range files {
		name := filepath.Base(f)
		names = append(names, name)
		want, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := cm.Data[name]
		if !ok || got != string(want) {
			t.Errorf("ConfigMap entry %s differs from grafana/dashboards/%s (present %v)", name, name, ok)
			continue
		}
		var d struct {
			UID, Title string
		}
		if err := json.Unmarshal([]byte(got), &d); err != nil || d.UID == "" || d.Title == "" {
			t.Errorf("%s: %v, uid %q title %q; want a dashboard", name, err, d.UID, d.Title)
		}
	}
	if got := keys(cm.Data); !slices.Equal(got, names) {
		t.Errorf("ConfigMap entries %v, want %v", got, names)
	}
	o = render(t, "lockscope", variants["deployment, TLS, created credentials"])
	cm = o.configMaps["lockscope-dashboards"]
	if cm == nil || cm.Namespace != "monitoring" || cm.Annotations["grafana_folder"] != "Locks" {
		t.Errorf("ConfigMap %+v, want it in namespace monitoring with grafana_folder Locks", cm)
	}
}
