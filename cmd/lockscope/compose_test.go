package main

import (
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

// The compose stack cannot run here (no Docker engine), so these tests check
// what can go wrong without one: the file is valid, every file it mounts
// exists, every published port is the one the service listens on, and the
// lockscope services use only environment variables the binary knows.

const repoRoot = "../.."

type composeFile struct {
	Services map[string]composeService `yaml:"services"`
}

type composeService struct {
	Image       string            `yaml:"image"`
	Build       any               `yaml:"build"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Ports       []string          `yaml:"ports"`
	Volumes     []string          `yaml:"volumes"`
	DependsOn   any               `yaml:"depends_on"`
}

func loadCompose(t *testing.T) composeFile {
	t.Helper()
	var c composeFile
	redistest.ReadYAML(t, filepath.Join(repoRoot, "docker-compose.yml"), &c)
	if len(c.Services) == 0 {
		t.Fatal("docker-compose.yml has no services")
	}
	return c
}

func TestComposeConfigIsValid(t *testing.T) {
	t.Parallel()
	bin, err := exec.LookPath("docker-compose")
	if err != nil {
		t.Fatal("docker-compose not found in PATH: install it (apt-get install -y --no-install-recommends docker-compose)")
	}
	cmd := exec.Command(bin, "-f", "docker-compose.yml", "config", "-q")
	cmd.Dir = repoRoot
	cmd.Env = environ([]string{"LOCKSCOPE_OPERATOR_PASSWORD=compose-test-password"})
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("docker-compose -f docker-compose.yml config -q: %v\n%s", err, out)
	}
	// Without an operator password it refuses to start, saying why (no
	// default password that anyone who reads the file knows).
	cmd = exec.Command(bin, "-f", "docker-compose.yml", "config", "-q")
	cmd.Dir = repoRoot
	cmd.Env = environ(nil)
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "set LOCKSCOPE_OPERATOR_PASSWORD") {
		t.Errorf("docker-compose config without LOCKSCOPE_OPERATOR_PASSWORD = %v\n%s\nwant it refused, saying to set it", err, out)
	}
}

// mounts returns a service's bind mounts as container path -> repo path.
func mounts(t *testing.T, name string, s composeService) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, v := range s.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) < 2 || !strings.HasPrefix(parts[0], "./") {
			t.Errorf("service %s: volume %q is not a ./repo-path:/container-path bind mount", name, v)
			continue
		}
		m[parts[1]] = filepath.Clean(parts[0])
	}
	return m
}

func TestComposeMountsExist(t *testing.T) {
	t.Parallel()
	c := loadCompose(t)
	n := 0
	for name, s := range c.Services {
		for dst, src := range mounts(t, name, s) {
			n++
			if _, err := os.Stat(filepath.Join(repoRoot, src)); err != nil {
				t.Errorf("service %s mounts %s at %s: %v", name, src, dst, err)
			}
		}
	}
	if n < 5 {
		t.Errorf("compose mounts %d files, want prometheus.yml, the rules, alertmanager.yml and grafana's two directories", n)
	}
}

// listenPort returns the port a service listens on, read from the flag or
// environment variable that sets it.
func listenPort(t *testing.T, name string, s composeService) string {
	t.Helper()
	addr := ""
	if v, ok := s.Environment["LOCKSCOPE_LISTEN"]; ok {
		addr = v
	}
	if v, ok := s.Environment["GF_SERVER_HTTP_PORT"]; ok {
		addr = ":" + v
	}
	for i, a := range s.Command {
		if v, ok := strings.CutPrefix(a, "--web.listen-address="); ok {
			addr = v
		}
		if a == "--port" && i+1 < len(s.Command) {
			addr = ":" + s.Command[i+1]
		}
	}
	if addr == "" {
		t.Fatalf("service %s: no listen flag or variable (LOCKSCOPE_LISTEN, --port, --web.listen-address, GF_SERVER_HTTP_PORT)", name)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("service %s listens on %q: %v", name, addr, err)
	}
	if host == "127.0.0.1" || host == "localhost" {
		t.Errorf("service %s listens on %s: loopback inside a container cannot be published", name, addr)
	}
	return port
}

func TestComposePortsMatchListenFlags(t *testing.T) {
	t.Parallel()
	c := loadCompose(t)
	published := 0
	for name, s := range c.Services {
		for _, p := range s.Ports {
			parts := strings.Split(p, ":")
			if len(parts) != 3 || parts[0] != "127.0.0.1" {
				t.Errorf("service %s publishes %q, want 127.0.0.1:HOST:CONTAINER (loopback only)", name, p)
				continue
			}
			published++
			if want := listenPort(t, name, s); parts[2] != want || parts[1] != want {
				t.Errorf("service %s publishes %q but listens on port %s", name, p, want)
			}
		}
	}
	for _, want := range []string{"lockscope", "prometheus", "grafana", "alertmanager"} {
		if len(c.Services[want].Ports) == 0 {
			t.Errorf("service %s publishes no port", want)
		}
	}
	if published == 0 {
		t.Error("compose publishes no port")
	}
}

func TestComposeLockscopeServices(t *testing.T) {
	t.Parallel()
	c := loadCompose(t)
	redis, ok := c.Services["redis"]
	if !ok {
		t.Fatal("no redis service")
	}
	if i := slices.Index(redis.Command, "--notify-keyspace-events"); i < 0 || i+1 >= len(redis.Command) || redis.Command[i+1] != "KEA" {
		t.Errorf("redis command %q does not turn keyspace notifications on (--notify-keyspace-events KEA)", redis.Command)
	}
	redisPort := listenPort(t, "redis", redis)
	commands := map[string]bool{}
	for name, s := range c.Services {
		if s.Image != "lockscope:local" {
			continue
		}
		if len(s.Command) == 0 {
			t.Errorf("service %s: no lockscope command", name)
			continue
		}
		sub := s.Command[0]
		commands[sub] = true
		help, stderr, code := lockscope(t, nil, "", "help", sub)
		if code != 0 {
			t.Fatalf("lockscope help %s: exit %d: %s", sub, code, stderr)
		}
		for k, v := range s.Environment {
			if strings.HasPrefix(k, "LOCKSCOPE_") && !strings.Contains(help, "env "+k+",") && !strings.Contains(help, "env "+k+")") {
				t.Errorf("service %s sets %s, which 'lockscope %s' does not read", name, k, sub)
			}
			if k == "LOCKSCOPE_REDIS_URL" {
				u, err := url.Parse(v)
				if err != nil || u.Port() != redisPort {
					t.Errorf("service %s: LOCKSCOPE_REDIS_URL %q, want port %s of the redis service", name, v, redisPort)
				} else if _, ok := c.Services[u.Hostname()]; !ok {
					t.Errorf("service %s: LOCKSCOPE_REDIS_URL host %q is not a compose service", name, u.Hostname())
				}
			}
		}
	}
	if !commands["serve"] || !commands["load"] {
		t.Errorf("lockscope services run %v, want serve and load", commands)
	}
	if c.Services["lockscope"].Build == nil {
		t.Error("service lockscope does not build the image from the Dockerfile")
	}
}

func TestPrometheusConfigMatchesCompose(t *testing.T) {
	t.Parallel()
	c := loadCompose(t)
	var prom struct {
		RuleFiles []string `yaml:"rule_files"`
		Alerting  struct {
			Alertmanagers []struct {
				StaticConfigs []struct {
					Targets []string `yaml:"targets"`
				} `yaml:"static_configs"`
			} `yaml:"alertmanagers"`
		} `yaml:"alerting"`
		ScrapeConfigs []struct {
			JobName       string `yaml:"job_name"`
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	redistest.ReadYAML(t, filepath.Join(repoRoot, "prometheus.yml"), &prom)

	// target checks that host:port is a service listening on that port.
	target := func(what, hp string) {
		host, port, err := net.SplitHostPort(hp)
		s, ok := c.Services[host]
		if err != nil || !ok {
			t.Errorf("%s target %q is not a compose service", what, hp)
			return
		}
		if want := listenPort(t, host, s); port != want {
			t.Errorf("%s target %q, but %s listens on port %s", what, hp, host, want)
		}
	}
	scraped := false
	for _, sc := range prom.ScrapeConfigs {
		if sc.JobName != "lockscope" { // LockscopeDown looks for up{job="lockscope"}
			continue
		}
		for _, st := range sc.StaticConfigs {
			for _, tg := range st.Targets {
				scraped = true
				target("scrape job lockscope", tg)
			}
		}
	}
	if !scraped {
		t.Error("prometheus.yml has no scrape job named lockscope with a target")
	}
	am := 0
	for _, a := range prom.Alerting.Alertmanagers {
		for _, st := range a.StaticConfigs {
			for _, tg := range st.Targets {
				am++
				target("alertmanager", tg)
			}
		}
	}
	if am == 0 {
		t.Error("prometheus.yml sends alerts nowhere")
	}
	pm := mounts(t, "prometheus", c.Services["prometheus"])
	if len(prom.RuleFiles) == 0 {
		t.Error("prometheus.yml loads no rule files")
	}
	for _, rf := range prom.RuleFiles {
		if src, ok := pm[rf]; !ok || src != filepath.Clean("alerts/lockscope.rules.yml") {
			t.Errorf("rule file %s is not alerts/lockscope.rules.yml mounted into prometheus (mounts %v)", rf, pm)
		}
	}
	if _, ok := pm["/etc/prometheus/prometheus.yml"]; !ok || !slices.Contains(c.Services["prometheus"].Command, "--config.file=/etc/prometheus/prometheus.yml") {
		t.Errorf("prometheus does not load the mounted prometheus.yml (mounts %v, command %q)", pm, c.Services["prometheus"].Command)
	}
}

func TestGrafanaProvisioningMatchesCompose(t *testing.T) {
	t.Parallel()
	c := loadCompose(t)
	gm := mounts(t, "grafana", c.Services["grafana"])
	if gm["/etc/grafana/provisioning"] != "grafana/provisioning" {
		t.Fatalf("grafana mounts %v, want grafana/provisioning at /etc/grafana/provisioning", gm)
	}
	files, _ := filepath.Glob(filepath.Join(repoRoot, "grafana/provisioning/dashboards/*.yml"))
	if len(files) == 0 {
		t.Fatal("no grafana/provisioning/dashboards/*.yml")
	}
	for _, f := range files {
		var p struct {
			Providers []struct {
				Options struct {
					Path string `yaml:"path"`
				} `yaml:"options"`
			} `yaml:"providers"`
		}
		rel, _ := filepath.Rel(repoRoot, f)
		redistest.ReadYAML(t, filepath.Join(repoRoot, rel), &p)
		for _, pr := range p.Providers {
			if src, ok := gm[pr.Options.Path]; !ok || src != "grafana/dashboards" {
				t.Errorf("%s: provider path %q is not where compose mounts grafana/dashboards (%v)", rel, pr.Options.Path, gm)
			}
		}
	}
	files, _ = filepath.Glob(filepath.Join(repoRoot, "grafana/provisioning/datasources/*.yml"))
	if len(files) == 0 {
		t.Fatal("no grafana/provisioning/datasources/*.yml")
	}
	for _, f := range files {
		var d struct {
			Datasources []struct {
				Type string `yaml:"type"`
				URL  string `yaml:"url"`
			} `yaml:"datasources"`
		}
		rel, _ := filepath.Rel(repoRoot, f)
		redistest.ReadYAML(t, filepath.Join(repoRoot, rel), &d)
		for _, ds := range d.Datasources {
			if ds.Type != "prometheus" {
				continue
			}
			u, err := url.Parse(ds.URL)
			s, ok := c.Services[u.Hostname()]
			if err != nil || !ok {
				t.Errorf("%s: datasource url %q is not a compose service", rel, ds.URL)
				continue
			}
			if want := listenPort(t, u.Hostname(), s); u.Port() != want {
				t.Errorf("%s: datasource url %q, but %s listens on %s", rel, ds.URL, u.Hostname(), want)
			}
		}
	}
}

func TestDockerfile(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	df := string(b)
	stages := regexp.MustCompile(`(?m)^FROM `).FindAllStringIndex(df, -1)
	if len(stages) < 2 {
		t.Fatalf("Dockerfile has %d stages, want a builder and a small final stage", len(stages))
	}
	final := df[stages[len(stages)-1][0]:]
	user := regexp.MustCompile(`(?m)^USER (\S+)`).FindStringSubmatch(final)
	if user == nil || strings.HasPrefix(user[1], "root") || strings.HasPrefix(user[1], "0") {
		t.Errorf("final stage runs as %v, want a non-root USER", user)
	}
	if !strings.Contains(df, "./cmd/lockscope") {
		t.Error("Dockerfile does not build ./cmd/lockscope")
	}
	listen := regexp.MustCompile(`(?m)^ENV LOCKSCOPE_LISTEN=(\S+)`).FindStringSubmatch(final)
	expose := regexp.MustCompile(`(?m)^EXPOSE (\d+)`).FindStringSubmatch(final)
	if listen == nil || expose == nil {
		t.Fatalf("final stage lacks ENV LOCKSCOPE_LISTEN or EXPOSE")
	}
	if _, port, _ := net.SplitHostPort(listen[1]); port != expose[1] {
		t.Errorf("image listens on %s but exposes %s", listen[1], expose[1])
	}
	c := loadCompose(t)
	if p := listenPort(t, "lockscope", c.Services["lockscope"]); p != expose[1] {
		t.Errorf("compose lockscope listens on %s, image exposes %s", p, expose[1])
	}
	ignore, err := os.ReadFile(filepath.Join(repoRoot, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(ignore), "\n") {
		for _, needed := range []string{"go.mod", "go.sum", "cmd", "internal", "lock", "event", "collector", "dashboard"} {
			if strings.TrimSpace(line) == needed || strings.TrimSpace(line) == "/"+needed {
				t.Errorf(".dockerignore excludes %s, which the build needs", needed)
			}
		}
	}
}

// dockerIgnored reports whether rel (slash-separated, relative to the build
// context) is excluded by one of the .dockerignore patterns. It covers the
// forms the file uses: names and globs anchored at the root, "/x", and
// "**/x" for any depth; a match on a directory excludes what is under it.
func dockerIgnored(patterns []string, rel string) bool {
	for _, p := range patterns {
		p = strings.TrimPrefix(p, "/")
		anyDepth := strings.HasPrefix(p, "**/")
		p = strings.TrimPrefix(p, "**/")
		parts := strings.Split(rel, "/")
		for start := range parts {
			if start > 0 && !anyDepth {
				break
			}
			for end := start + 1; end <= len(parts); end++ {
				if ok, _ := filepath.Match(p, strings.Join(parts[start:end], "/")); ok {
					return true
				}
			}
		}
	}
	return false
}

// The Docker build context, .dockerignore applied, still holds every file
// the binary's packages need (sources, Lua scripts, embedded assets).
func TestDockerBuildContextIsComplete(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join(repoRoot, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	for _, line := range strings.Split(string(b), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			patterns = append(patterns, line)
		}
	}
	if !dockerIgnored(patterns, ".git/config") || !dockerIgnored(patterns, "event/testdata/fuzz/FuzzDecode/x") || dockerIgnored(patterns, "lock/obtain.lua") {
		t.Fatalf("dockerIgnored does not read %v as Docker would", patterns)
	}
	ctxDir := t.TempDir()
	root, _ := filepath.Abs(repoRoot)
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if rel == "." {
			return nil
		}
		if dockerIgnored(patterns, rel) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		dst := filepath.Join(ctxDir, rel)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(goTool(), "list", "-e", "-deps",
		"-f", "{{if .Error}}{{.ImportPath}}: {{.Error}}{{end}}{{range .DepsErrors}}{{.}}{{end}}", "./cmd/lockscope")
	cmd.Dir = ctxDir
	cmd.Env = append(environ(nil), "GOFLAGS=-mod=readonly")
	out, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "" {
		t.Errorf("go list ./cmd/lockscope in the Docker build context: %v\n%s", err, out)
	}
}
