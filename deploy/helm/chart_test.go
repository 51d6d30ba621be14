package helm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// root is the repository's root, relative to this package.
const root = "../.."

const namespace = "locks"

// The chart's copies of the rules and dashboards are the repository's,
// byte for byte, and it has no copy of a file that is gone.
func TestChartCopiesMatchTheirSources(t *testing.T) {
	copies, err := Copies(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range copies {
		want, err := os.ReadFile(filepath.Join(root, c.From))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(ChartDir, c.To))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s/%s differs from %s (%v): run 'go generate ./...' in deploy/helm", ChartDir, c.To, c.From, err)
		}
	}
	stale, err := Stale(ChartDir, copies)
	if err != nil {
		t.Fatal(err)
	}
	if len(stale) > 0 {
		t.Errorf("%s has copies without a source: %v: run 'go generate ./...' in deploy/helm", ChartDir, stale)
	}
}

// objects is a rendered chart, decoded strictly into the API types.
type objects struct {
	statefulSet *appsv1.StatefulSet
	deployment  *appsv1.Deployment
	services    map[string]*corev1.Service
	secrets     map[string]*corev1.Secret
	configMaps  map[string]*corev1.ConfigMap
	pdb         *policyv1.PodDisruptionBudget
	netpol      *networkingv1.NetworkPolicy
	monitor     *monitoringv1.ServiceMonitor
	rule        *monitoringv1.PrometheusRule
	notes       string
}

// podSpec is the workload's pod template, whichever kind renders it.
func (o *objects) pod(t *testing.T) *corev1.PodTemplateSpec {
	t.Helper()
	switch {
	case o.statefulSet != nil && o.deployment == nil:
		return &o.statefulSet.Spec.Template
	case o.deployment != nil && o.statefulSet == nil:
		return &o.deployment.Spec.Template
	}
	t.Fatalf("want one StatefulSet or one Deployment, got %v and %v", o.statefulSet != nil, o.deployment != nil)
	return nil
}

func (o *objects) container(t *testing.T) *corev1.Container {
	t.Helper()
	p := o.pod(t)
	if len(p.Spec.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(p.Spec.Containers))
	}
	return &p.Spec.Containers[0]
}

// env returns the container's variable name, or nil.
func (o *objects) env(t *testing.T, name string) *corev1.EnvVar {
	t.Helper()
	for i, e := range o.container(t).Env {
		if e.Name == name {
			return &o.container(t).Env[i]
		}
	}
	return nil
}

// render renders the chart as `helm template` does (Helm's install action,
// client only, dry run) with vals (YAML) and decodes every object strictly.
func render(t *testing.T, release, vals string) *objects {
	t.Helper()
	manifest, notes, err := renderText(release, vals)
	if err != nil {
		t.Fatalf("render with values %s: %v", vals, err)
	}
	o := &objects{services: map[string]*corev1.Service{}, secrets: map[string]*corev1.Secret{}, configMaps: map[string]*corev1.ConfigMap{}, notes: notes}
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(manifest, -1) {
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			t.Fatalf("rendered document is not YAML: %v\n%s", err, doc)
		}
		var obj any
		switch tm.APIVersion + " " + tm.Kind {
		case "apps/v1 StatefulSet":
			o.statefulSet = &appsv1.StatefulSet{}
			obj = o.statefulSet
		case "apps/v1 Deployment":
			o.deployment = &appsv1.Deployment{}
			obj = o.deployment
		case "v1 Service":
			s := &corev1.Service{}
			obj = s
			defer func() { o.services[s.Name] = s }()
		case "v1 Secret":
			s := &corev1.Secret{}
			obj = s
			defer func() { o.secrets[s.Name] = s }()
		case "v1 ConfigMap":
			c := &corev1.ConfigMap{}
			obj = c
			defer func() { o.configMaps[c.Name] = c }()
		case "networking.k8s.io/v1 NetworkPolicy":
			o.netpol = &networkingv1.NetworkPolicy{}
			obj = o.netpol
		case "policy/v1 PodDisruptionBudget":
			o.pdb = &policyv1.PodDisruptionBudget{}
			obj = o.pdb
		case "monitoring.coreos.com/v1 ServiceMonitor":
			o.monitor = &monitoringv1.ServiceMonitor{}
			obj = o.monitor
		case "monitoring.coreos.com/v1 PrometheusRule":
			o.rule = &monitoringv1.PrometheusRule{}
			obj = o.rule
		default:
			t.Fatalf("unexpected object %s %s:\n%s", tm.APIVersion, tm.Kind, doc)
		}
		// Strict: an unknown or misspelt field, or one given twice, fails.
		if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
			t.Fatalf("%s does not decode strictly into its API type: %v\n%s", tm.Kind, err, doc)
		}
	}
	return o
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, line := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

func renderText(release, vals string) (manifest, notes string, err error) {
	chrt, err := loader.Load(ChartDir)
	if err != nil {
		return "", "", err
	}
	values, err := chartutil.ReadValues([]byte(vals))
	if err != nil {
		return "", "", err
	}
	inst := action.NewInstall(&action.Configuration{})
	inst.DryRun, inst.DryRunOption, inst.ClientOnly, inst.Replace = true, "client", true, true
	inst.ReleaseName, inst.Namespace = release, namespace
	inst.KubeVersion = &chartutil.KubeVersion{Version: "v1.30.0", Major: "1", Minor: "30"}
	rel, err := inst.Run(chrt, values)
	if err != nil {
		return "", "", err
	}
	return rel.Manifest, rel.Info.Notes, nil
}

// The variants the tests render: defaults, and every optional part on.
var variants = map[string]string{
	"defaults": ``,
	"deployment, TLS, created credentials": `
kind: Deployment
replicaCount: 3
redis: {url: "rediss://redis.example.com:6380/0", tls: {existingSecret: redis-client-tls}}
operator: {user: ops, password: correct-horse-battery, token: tok-0123456789abcdef, tokens: "alice tok-alice-0123456789\n"}
serviceMonitor: {labels: {release: kube-prometheus-stack}, scrapeTimeout: 10s}
prometheusRule: {labels: {release: kube-prometheus-stack}}
grafanaDashboards: {namespace: monitoring, annotations: {grafana_folder: Locks}}
config: {watch: ["lock:*", "job:*"], allowedHosts: [locks.example.com], maxKeys: 50000}
`,
	"existing secrets, one replica, nothing optional": `
replicaCount: 1
redis: {existingSecret: redis-conn, existingSecretKey: url}
operator: {existingSecret: lockscope-operators, tokensFile: true}
serviceMonitor: {enabled: false}
prometheusRule: {enabled: false}
grafanaDashboards: {enabled: false}
spreadAcrossNodes: false
`,
}

// helm lint passes, strictly (warnings fail), with every variant.
func TestHelmLint(t *testing.T) {
	for name, vals := range variants {
		values, err := chartutil.ReadValues([]byte(vals))
		if err != nil {
			t.Fatal(err)
		}
		l := action.NewLint()
		l.Strict, l.Namespace = true, namespace
		res := l.Run([]string{ChartDir}, values)
		for _, m := range res.Messages {
			t.Logf("%s: %s", name, m)
		}
		if len(res.Errors) > 0 || res.TotalChartsLinted != 1 {
			t.Errorf("helm lint --strict with %s: %d charts linted, errors %v", name, res.TotalChartsLinted, res.Errors)
		}
	}
}

// Every variant renders into objects that decode strictly into the
// Kubernetes and Prometheus Operator types (render fails otherwise).
func TestEveryVariantRendersValidObjects(t *testing.T) {
	for name, vals := range variants {
		t.Run(name, func(t *testing.T) {
			o := render(t, "lockscope", vals)
			c := o.container(t)
			if c.Image != "lockscope:0.1.0" {
				t.Errorf("image %q, want lockscope:0.1.0 (the chart's appVersion)", c.Image)
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	o := render(t, "lockscope", variants["defaults"])
	ss := o.statefulSet
	if ss == nil || o.deployment != nil {
		t.Fatalf("defaults render a StatefulSet %v and a Deployment %v; want the StatefulSet only", ss != nil, o.deployment != nil)
	}
	if ss.Spec.Replicas == nil || *ss.Spec.Replicas != 2 {
		t.Errorf("replicas %v, want 2", ss.Spec.Replicas)
	}
	if ss.Spec.ServiceName != "lockscope-headless" || o.services["lockscope-headless"] == nil || o.services["lockscope-headless"].Spec.ClusterIP != "None" {
		t.Errorf("serviceName %q, want the headless Service lockscope-headless", ss.Spec.ServiceName)
	}
	c := o.container(t)
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{{"liveness", c.LivenessProbe, "/healthz"}, {"readiness", c.ReadinessProbe, "/readyz"}, {"startup", c.StartupProbe, "/healthz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil || p.probe.HTTPGet.Path != p.path || p.probe.HTTPGet.Port.String() != "http" {
			t.Errorf("%s probe %+v, want GET %s on port http", p.name, p.probe, p.path)
		}
	}
	if len(c.Ports) != 1 || c.Ports[0].ContainerPort != 8080 || c.Ports[0].Name != "http" {
		t.Errorf("ports %+v, want http 8080", c.Ports)
	}
	// The documented bound: 64 MiB + 1 per 1024 keys = 259 MiB soft limit.
	wantRes := map[string]string{"requests.memory": "291Mi", "requests.cpu": "100m", "limits.memory": "388Mi"}
	if got := resources(c); !cmp.Equal(got, wantRes) {
		t.Errorf("resources (-want +got):\n%s", cmp.Diff(wantRes, got))
	}
	ps, sc := o.pod(t).Spec.SecurityContext, c.SecurityContext
	if ps == nil || ps.RunAsNonRoot == nil || !*ps.RunAsNonRoot || ps.RunAsUser == nil || *ps.RunAsUser == 0 {
		t.Errorf("pod security context %+v, want runAsNonRoot and a non-zero user", ps)
	}
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("container security context %+v, want a read-only root filesystem, no privilege escalation, no capabilities", sc)
	}
	if e := o.env(t, "LOCKSCOPE_REPLICA"); e == nil || e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "metadata.name" {
		t.Errorf("LOCKSCOPE_REPLICA = %+v, want the pod's name (downward API)", e)
	}
	if e := o.env(t, "LOCKSCOPE_LISTEN"); e == nil || e.Value != ":8080" {
		t.Errorf("LOCKSCOPE_LISTEN = %+v, want :8080", e)
	}
	if e := o.env(t, "LOCKSCOPE_REDIS_URL"); e == nil || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil ||
		e.ValueFrom.SecretKeyRef.Name != "lockscope" || e.ValueFrom.SecretKeyRef.Key != "redis-url" {
		t.Errorf("LOCKSCOPE_REDIS_URL = %+v, want the created Secret's redis-url", e)
	}
	if s := o.secrets["lockscope"]; s == nil || s.StringData["redis-url"] != "redis://redis:6379/0" || len(s.StringData) != 1 {
		t.Errorf("Secret lockscope = %+v, want only redis-url", s)
	}
	for _, name := range []string{"LOCKSCOPE_OPERATOR_USER", "LOCKSCOPE_OPERATOR_PASSWORD", "LOCKSCOPE_OPERATOR_TOKEN", "LOCKSCOPE_OPERATOR_TOKENS_FILE", "LOCKSCOPE_REDIS_CA_CERT"} {
		if e := o.env(t, name); e != nil {
			t.Errorf("%s is set without credentials or TLS: %+v", name, e)
		}
	}
	if !strings.Contains(o.notes, "read-only") {
		t.Errorf("NOTES do not say the dashboard is read-only:\n%s", o.notes)
	}
	wantHosts := "localhost,lockscope,lockscope.locks,lockscope.locks.svc,lockscope.locks.svc.cluster.local"
	if e := o.env(t, "LOCKSCOPE_ALLOWED_HOSTS"); e == nil || e.Value != wantHosts {
		t.Errorf("LOCKSCOPE_ALLOWED_HOSTS = %+v, want %s", e, wantHosts)
	}
	if o.pdb == nil || o.pdb.Spec.MaxUnavailable == nil || o.pdb.Spec.MaxUnavailable.IntValue() != 1 {
		t.Errorf("PodDisruptionBudget %+v, want maxUnavailable 1", o.pdb)
	}
	if o.pod(t).Spec.AutomountServiceAccountToken == nil || *o.pod(t).Spec.AutomountServiceAccountToken {
		t.Errorf("the pod mounts a service account token; lockscope never calls the Kubernetes API")
	}

	// The ServiceMonitor scrapes /metrics through the dashboard Service, not
	// the headless one too (each pod would be scraped twice).
	m := o.monitor
	if m == nil || len(m.Spec.Endpoints) != 1 || m.Spec.Endpoints[0].Port != "http" || m.Spec.Endpoints[0].Path != "/metrics" {
		t.Fatalf("ServiceMonitor %+v, want one endpoint: port http, /metrics", m)
	}
	var selected []string
	for name, s := range o.services {
		if matches(m.Spec.Selector.MatchLabels, s.Labels) {
			selected = append(selected, name)
		}
		if !matches(s.Spec.Selector, o.pod(t).Labels) {
			t.Errorf("Service %s selects %v, which the pods (%v) do not carry", name, s.Spec.Selector, o.pod(t).Labels)
		}
	}
	if !slices.Equal(selected, []string{"lockscope"}) {
		t.Errorf("the ServiceMonitor selects Services %v, want [lockscope]", selected)
	}
	if !matches(ss.Spec.Selector.MatchLabels, o.pod(t).Labels) {
		t.Errorf("the StatefulSet's selector %v does not match its pods' labels %v", ss.Spec.Selector.MatchLabels, o.pod(t).Labels)
	}
}

func matches(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func resources(c *corev1.Container) map[string]string {
	out := map[string]string{}
	for name, q := range c.Resources.Requests {
		out["requests."+string(name)] = q.String()
	}
	for name, q := range c.Resources.Limits {
		out["limits."+string(name)] = q.String()
	}
	return out
}

// A Deployment names each replica by its pod too; the headless Service is
// only for a StatefulSet.
func TestDeploymentKind(t *testing.T) {
	o := render(t, "prod", variants["deployment, TLS, created credentials"])
	if o.deployment == nil || *o.deployment.Spec.Replicas != 3 || o.deployment.Name != "prod-lockscope" {
		t.Fatalf("Deployment %+v, want prod-lockscope with 3 replicas", o.deployment)
	}
	if _, ok := o.services["prod-lockscope-headless"]; ok || len(o.services) != 1 {
		t.Errorf("Services %v, want prod-lockscope only", keys(o.services))
	}
	if e := o.env(t, "LOCKSCOPE_REPLICA"); e == nil || e.ValueFrom.FieldRef.FieldPath != "metadata.name" {
		t.Errorf("LOCKSCOPE_REPLICA = %+v, want the pod's name", e)
	}
	if _, err := renderTextErr("lockscope", "kind: DaemonSet"); err == nil || !strings.Contains(err.Error(), `kind must be StatefulSet or Deployment, not "DaemonSet"`) {
		t.Errorf("kind DaemonSet renders with error %v, want it refused by name", err)
	}
}

func renderTextErr(release, vals string) (string, error) {
	m, _, err := renderText(release, vals)
	return m, err
}

func keys[V any](m map[string]V) []string {
	var k []string
	for name := range m {
		k = append(k, name)
	}
	slices.Sort(k)
	return k
}

// Operator credentials set as values go into the chart's Secret and reach
// lockscope only from it: variables from secretKeyRef, the tokens file
// mounted read-only, group-readable for the non-root user (fsGroup).
func TestOperatorCredentialsComeFromASecret(t *testing.T) {
	o := render(t, "prod", variants["deployment, TLS, created credentials"])
	s := o.secrets["prod-lockscope"]
	want := map[string]string{"redis-url": "rediss://redis.example.com:6380/0", "user": "ops", "password": "correct-horse-battery",
		"token": "tok-0123456789abcdef", "tokens": "alice tok-alice-0123456789\n"}
	if s == nil || !cmp.Equal(s.StringData, want) {
		t.Errorf("Secret prod-lockscope (-want +got):\n%s", cmp.Diff(want, s.StringData))
	}
	for env, key := range map[string]string{"LOCKSCOPE_OPERATOR_USER": "user", "LOCKSCOPE_OPERATOR_PASSWORD": "password", "LOCKSCOPE_OPERATOR_TOKEN": "token"} {
		e := o.env(t, env)
		if e == nil || e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || e.ValueFrom.SecretKeyRef.Name != "prod-lockscope" || e.ValueFrom.SecretKeyRef.Key != key {
			t.Errorf("%s = %+v, want secretKeyRef prod-lockscope/%s", env, e, key)
		}
	}
	checkTokensMount(t, o, "prod-lockscope", "tokens")
	pod := o.pod(t)
	if pod.Annotations["checksum/secret"] == "" {
		t.Errorf("no checksum/secret annotation: a changed Secret would not restart the pods")
	}
	for _, sec := range []string{"correct-horse-battery", "tok-0123456789abcdef", "tok-alice"} {
		b, _ := json.Marshal(pod)
		if strings.Contains(string(b), sec) {
			t.Errorf("the pod spec carries the secret %q", sec)
		}
	}

	// An existing Secret: referenced, nothing created for the operator.
	o = render(t, "lockscope", variants["existing secrets, one replica, nothing optional"])
	if _, ok := o.secrets["lockscope"]; ok {
		t.Errorf("a Secret is created although the Redis URL and the credentials come from existing ones")
	}
	for env, key := range map[string]string{"LOCKSCOPE_OPERATOR_USER": "user", "LOCKSCOPE_OPERATOR_PASSWORD": "password", "LOCKSCOPE_OPERATOR_TOKEN": "token"} {
		e := o.env(t, env)
		if e == nil || e.ValueFrom.SecretKeyRef.Name != "lockscope-operators" || e.ValueFrom.SecretKeyRef.Key != key ||
			e.ValueFrom.SecretKeyRef.Optional == nil || !*e.ValueFrom.SecretKeyRef.Optional {
			t.Errorf("%s = %+v, want optional secretKeyRef lockscope-operators/%s", env, e, key)
		}
	}
	if e := o.env(t, "LOCKSCOPE_REDIS_URL"); e == nil || e.ValueFrom.SecretKeyRef.Name != "redis-conn" || e.ValueFrom.SecretKeyRef.Key != "url" {
		t.Errorf("LOCKSCOPE_REDIS_URL = %+v, want redis-conn/url", e)
	}
	checkTokensMount(t, o, "lockscope-operators", "tokens")
	if o.pdb != nil || o.monitor != nil || o.rule != nil || len(o.configMaps) != 0 {
		t.Errorf("one replica with monitoring off renders a PDB %v, ServiceMonitor %v, PrometheusRule %v, ConfigMaps %v; want none",
			o.pdb != nil, o.monitor != nil, o.rule != nil, keys(o.configMaps))
	}
	if o.pod(t).Spec.Affinity != nil {
		t.Errorf("affinity %+v with spreadAcrossNodes false, want none", o.pod(t).Spec.Affinity)
	}
}

func checkTokensMount(t *testing.T, o *objects, secret, key string) {
	t.Helper()
	if e := o.env(t, "LOCKSCOPE_OPERATOR_TOKENS_FILE"); e == nil || e.Value != "/etc/lockscope/operator/tokens" {
		t.Errorf("LOCKSCOPE_OPERATOR_TOKENS_FILE = %+v, want /etc/lockscope/operator/tokens", e)
	}
	vol := volume(o.pod(t), "operator-tokens")
	if vol == nil || vol.Secret == nil || vol.Secret.SecretName != secret || len(vol.Secret.Items) != 1 || vol.Secret.Items[0].Key != key ||
		vol.Secret.Items[0].Path != "tokens" || vol.Secret.DefaultMode == nil || *vol.Secret.DefaultMode != 0o440 {
		t.Errorf("operator-tokens volume %+v, want %s/%s as tokens, mode 0440", vol, secret, key)
	}
	if m := mount(o.container(t), "operator-tokens"); m == nil || !m.ReadOnly || m.MountPath != "/etc/lockscope/operator" {
		t.Errorf("operator-tokens mount %+v, want read-only at /etc/lockscope/operator", m)
	}
	if fs := o.pod(t).Spec.SecurityContext.FSGroup; fs == nil || *fs == 0 {
		t.Errorf("fsGroup %v: a non-root container could not read the mounted Secret", fs)
	}
}

func volume(p *corev1.PodTemplateSpec, name string) *corev1.Volume {
	for i, v := range p.Spec.Volumes {
		if v.Name == name {
			return &p.Spec.Volumes[i]
		}
	}
	return nil
}

func mount(c *corev1.Container, name string) *corev1.VolumeMount {
	for i, m := range c.VolumeMounts {
		if m.Name == name {
			return &c.VolumeMounts[i]
		}
	}
	return nil
}

// TLS to Redis: the certificates come from a Secret mounted read-only, the
// variables name its files.
func TestRedisTLSFromASecret(t *testing.T) {
	o := render(t, "prod", variants["deployment, TLS, created credentials"])
	for env, want := range map[string]string{
		"LOCKSCOPE_REDIS_CA_CERT":     "/etc/lockscope/redis-tls/ca.crt",
		"LOCKSCOPE_REDIS_CLIENT_CERT": "/etc/lockscope/redis-tls/tls.crt",
		"LOCKSCOPE_REDIS_CLIENT_KEY":  "/etc/lockscope/redis-tls/tls.key",
	} {
		if e := o.env(t, env); e == nil || e.Value != want {
			t.Errorf("%s = %+v, want %s", env, e, want)
		}
	}
	vol := volume(o.pod(t), "redis-tls")
	if vol == nil || vol.Secret == nil || vol.Secret.SecretName != "redis-client-tls" || *vol.Secret.DefaultMode != 0o440 {
		t.Errorf("redis-tls volume %+v, want Secret redis-client-tls mode 0440", vol)
	}
	if m := mount(o.container(t), "redis-tls"); m == nil || !m.ReadOnly || m.MountPath != "/etc/lockscope/redis-tls" {
		t.Errorf("redis-tls mount %+v, want read-only at /etc/lockscope/redis-tls", m)
	}
	// A CA only: no client certificate variables.
	o = render(t, "lockscope", `redis: {url: "rediss://r:6380", tls: {existingSecret: ca, certKey: ""}}`)
	if o.env(t, "LOCKSCOPE_REDIS_CA_CERT") == nil || o.env(t, "LOCKSCOPE_REDIS_CLIENT_CERT") != nil || o.env(t, "LOCKSCOPE_REDIS_CLIENT_KEY") != nil {
		t.Errorf("with certKey empty: CA %v, client cert %v, key %v; want the CA only",
			o.env(t, "LOCKSCOPE_REDIS_CA_CERT"), o.env(t, "LOCKSCOPE_REDIS_CLIENT_CERT"), o.env(t, "LOCKSCOPE_REDIS_CLIENT_KEY"))
	}
}

// Resources follow the documented memory bound as --max-keys and
// --memory-limit-mb move it; set resources replace it.
func TestResourcesFollowTheMemoryBound(t *testing.T) {
	for _, tt := range []struct {
		vals string
		want map[string]string
	}{
		{`config: {maxKeys: 1000000}`, map[string]string{"requests.memory": "1072Mi", "requests.cpu": "100m", "limits.memory": "1560Mi"}}, // 64 + 976
		{`config: {memoryLimitMb: 500, maxKeys: 1000000}`, map[string]string{"requests.memory": "532Mi", "requests.cpu": "100m", "limits.memory": "750Mi"}},
		{`resources: {limits: {memory: 1Gi}}`, map[string]string{"limits.memory": "1Gi"}},
	} {
		o := render(t, "lockscope", tt.vals)
		if got := resources(o.container(t)); !cmp.Equal(got, tt.want) {
			t.Errorf("resources with %s (-want +got):\n%s", tt.vals, cmp.Diff(tt.want, got))
		}
	}
}

// chartManaged are the serve flags' variables that the chart sets itself.
var chartManaged = []string{
	"LOCKSCOPE_REDIS_URL", "LOCKSCOPE_REDIS_TIMEOUT", "LOCKSCOPE_REDIS_CA_CERT", "LOCKSCOPE_REDIS_CLIENT_CERT", "LOCKSCOPE_REDIS_CLIENT_KEY",
	"LOCKSCOPE_LISTEN", "LOCKSCOPE_REPLICA", "LOCKSCOPE_OPERATOR_USER", "LOCKSCOPE_OPERATOR_PASSWORD", "LOCKSCOPE_OPERATOR_TOKEN",
	"LOCKSCOPE_OPERATOR_TOKENS_FILE", "LOCKSCOPE_ALLOWED_HOSTS",
}

// Every flag of `lockscope serve` is reachable through the values: the
// chart sets it, or a `config` key of values.yaml names its variable and
// renders it. A flag added to serve without a value fails here.
func TestEveryServeFlagIsReachable(t *testing.T) {
	cmd := exec.Command("go", "run", "./cmd/lockscope", "help", "serve")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("lockscope help serve: %v", err)
	}
	vars := regexp.MustCompile(`env (LOCKSCOPE_[A-Z0-9_]+)`).FindAllStringSubmatch(string(out), -1)
	if len(vars) < 20 {
		t.Fatalf("found %d variables in 'lockscope help serve', want the 20 or more it documents:\n%s", len(vars), out)
	}
	b, err := os.ReadFile(filepath.Join(ChartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values struct {
		Config map[string]any `json:"config"`
	}
	if err := yaml.Unmarshal(b, &values); err != nil {
		t.Fatal(err)
	}
	// Set every config key and render: each must come out as its variable.
	set := map[string]any{}
	for k, v := range values.Config {
		switch v.(type) {
		case []any:
			set[k] = []string{"x-" + k, "y"}
		default:
			set[k] = "v-" + k
		}
	}
	vals, _ := yaml.Marshal(map[string]any{"config": set})
	o := render(t, "lockscope", string(vals))
	for _, m := range vars {
		name := m[1]
		if slices.Contains(chartManaged, name) {
			continue
		}
		key := ""
		for k := range values.Config {
			if "LOCKSCOPE_"+strings.ToUpper(snake(k)) == name {
				key = k
			}
		}
		if key == "" {
			t.Errorf("serve's %s has no key under config in values.yaml", name)
			continue
		}
		want := fmt.Sprint("v-", key)
		if _, list := values.Config[key].([]any); list {
			want = "x-" + key + ",y"
		}
		if e := o.env(t, name); e == nil || e.Value != want {
			t.Errorf("config.%s renders %s = %+v, want %q", key, name, e, want)
		}
	}
	// allowedHosts joins the chart's own names.
	if e := o.env(t, "LOCKSCOPE_ALLOWED_HOSTS"); e == nil || !strings.HasSuffix(e.Value, ",x-allowedHosts,y") {
		t.Errorf("LOCKSCOPE_ALLOWED_HOSTS = %+v, want the Service names then x-allowedHosts,y", e)
	}
	// Empty values keep lockscope's defaults: no variable.
	o = render(t, "lockscope", "")
	for _, e := range o.container(t).Env {
		if e.Value == "" && e.ValueFrom == nil {
			t.Errorf("%s is set empty", e.Name)
		}
	}
}

// snake is camelCase in snake_case, as Sprig's snakecase makes it.
func snake(s string) string {
	return strings.ToLower(regexp.MustCompile(`([a-z0-9])([A-Z])`).ReplaceAllString(s, "${1}_${2}"))
}

// Every top-level value is documented in the chart's README.
func TestValuesAreDocumented(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(ChartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(ChartDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(b, &values); err != nil {
		t.Fatal(err)
	}
	for k, v := range values {
		if !strings.Contains(string(readme), "`"+k) {
			t.Errorf("value %s is not in %s/README.md", k, ChartDir)
		}
		if m, ok := v.(map[string]any); ok && k != "podSecurityContext" && k != "securityContext" {
			for sub := range m {
				if !strings.Contains(string(readme), "`"+k+"."+sub) {
					t.Errorf("value %s.%s is not in %s/README.md", k, sub, ChartDir)
				}
			}
		}
	}
}
