package helm

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// The pod as rendered runs: lockscope started with exactly the rendered
// container's arguments and environment (Secret references resolved from
// the rendered Secret, the pod's name from the downward API), its Secret
// volume written as the kubelet writes it (root-owned, defaultMode, group
// fsGroup) and, when the test runs as root, as the pod's non-root user with
// fsGroup as a supplementary group. Its probes answer, the operator's
// credentials and tokens file work, and the Service's name is an allowed
// host.
func TestRenderedPodRuns(t *testing.T) {
	redisAddr := startRedis(t)
	port := freePort(t)
	o := render(t, "lockscope", fmt.Sprintf(`
redis: {url: "redis://%s/0"}
service: {port: %d}
operator: {user: ops, password: correct-horse-battery, tokens: "alice tok-alice-0123456789\n"}
`, redisAddr, port))
	pod, c := o.pod(t), o.container(t)
	secret := o.secrets["lockscope"]

	dir := mkdir(t, "")
	bin := filepath.Join(dir, "lockscope")
	build := exec.Command("go", "build", "-o", bin, "./cmd/lockscope")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	// Volumes: each Secret item as a file under dir, as the kubelet lays it.
	asRoot := os.Getuid() == 0
	sc := pod.Spec.SecurityContext
	mounts := map[string]string{} // mount path -> local directory
	for _, m := range c.VolumeMounts {
		vol := volume(pod, m.Name)
		if vol == nil || vol.Secret == nil || vol.Secret.SecretName != "lockscope" {
			t.Fatalf("volume %s: want the chart's Secret, got %+v", m.Name, vol)
		}
		local := mkdir(t, dir)
		mounts[m.MountPath] = local
		for _, item := range vol.Secret.Items {
			file := filepath.Join(local, item.Path)
			mode := os.FileMode(*vol.Secret.DefaultMode)
			if !asRoot {
				mode = 0o400 // our own file, as lockscope wants it
			}
			if err := os.WriteFile(file, []byte(secret.StringData[item.Key]), mode); err != nil {
				t.Fatal(err)
			}
			if asRoot {
				os.Chown(file, 0, int(*sc.FSGroup))
				os.Chmod(file, mode|0o040) // the kubelet adds group read for fsGroup
			}
		}
	}
	local := func(path string) string {
		for mp, l := range mounts {
			if rest, ok := strings.CutPrefix(path, mp+"/"); ok {
				return filepath.Join(l, rest)
			}
		}
		return path
	}

	var env []string
	for _, e := range c.Env {
		v := e.Value
		switch {
		case e.ValueFrom == nil:
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			v = "lockscope-0"
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			s, ok := o.secrets[ref.Name].StringData[ref.Key]
			if !ok && (ref.Optional == nil || !*ref.Optional) {
				t.Fatalf("%s: Secret %s has no %s", e.Name, ref.Name, ref.Key)
			}
			if !ok {
				continue
			}
			v = s
		default:
			t.Fatalf("%s: unexpected source %+v", e.Name, e.ValueFrom)
		}
		env = append(env, e.Name+"="+local(v))
	}
	cmd := exec.Command(bin, c.Args...)
	cmd.Env = append([]string{"PATH=/usr/bin:/bin"}, env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if asRoot {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(*sc.RunAsUser), Gid: uint32(*sc.RunAsGroup), Groups: []uint32{uint32(*sc.FSGroup)}}
	}
	var logs lockedBuffer // written by the copy below while the test reads it
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	logDone := make(chan struct{})
	go func() { io.Copy(&logs, stderr); close(logDone) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		<-logDone
		if t.Failed() {
			t.Logf("lockscope serve (as user %v):\n%s", asRoot, logs.String())
		}
	})

	base := "http://127.0.0.1:" + strconv.Itoa(port)
	deadline := time.Now().Add(60 * time.Second)
	for _, p := range []*corev1.Probe{c.StartupProbe, c.LivenessProbe, c.ReadinessProbe} {
		url := base + p.HTTPGet.Path
		for {
			code, _ := status(t, "GET", url, "", nil)
			if code == 200 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("probe %s = %d after 60 s, want 200", p.HTTPGet.Path, code)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	// The Go runtime's soft memory limit is the one the chart sized the pod
	// for (requests: the limit + 32 MiB): both follow --max-keys by one rule.
	m := regexp.MustCompile(`memory_limit_mib["=:]+(\d+)`).FindStringSubmatch(logs.String())
	if m == nil {
		t.Errorf("lockscope did not log its soft memory limit")
	} else if mib, _ := strconv.ParseInt(m[1], 10, 64); mib+32 != c.Resources.Requests.Memory().Value()>>20 {
		t.Errorf("lockscope's soft memory limit %d MiB, the chart's memory request %v: want the limit + 32 MiB", mib, c.Resources.Requests.Memory())
	}
	// The operator's credentials: basic auth and alice's token are accepted
	// (404: nothing held), a wrong token is not.
	body := `{"fingerprint": "0000000000000000", "reason": "chart test"}`
	release := base + "/api/v1/locks/nothing:held/release"
	for _, tt := range []struct {
		auth func(*http.Request)
		want int
	}{
		{func(r *http.Request) { r.SetBasicAuth("ops", "correct-horse-battery") }, 404},
		{func(r *http.Request) { r.Header.Set("Authorization", "Bearer tok-alice-0123456789") }, 404},
		{func(r *http.Request) { r.Header.Set("Authorization", "Bearer tok-wrong-0123456789") }, 401},
	} {
		if code, b := status(t, "POST", release, body, tt.auth); code != tt.want {
			t.Errorf("release = %d %s, want %d", code, b, tt.want)
		}
	}
	// The Service's names are allowed hosts; another name is not.
	for host, want := range map[string]int{"lockscope.locks.svc": 200, "lockscope": 200, "evil.example": 421} {
		if code, _ := status(t, "GET", base+"/api/v1/overview", "", func(r *http.Request) { r.Host = host }); code != want {
			t.Errorf("GET /api/v1/overview with Host %s = %d, want %d", host, code, want)
		}
	}
}

func status(t *testing.T, method, url, body string, set func(*http.Request)) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if set != nil {
		set(req)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// mkdir makes a directory any user may enter (the pod's user runs the
// binary and reads its mounts), removed at the end of the test.
func mkdir(t *testing.T, parent string) string {
	t.Helper()
	d, err := os.MkdirTemp(parent, "pod-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(d, 0o755)
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startRedis starts a private redis-server on loopback (a missing binary is
// a failure: scripts/deps.sh installs it).
func startRedis(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatal("redis-server not found: install it (apt-get install -y redis-server)")
	}
	addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	_, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command(bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", mkdir(t, ""))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for start := time.Now(); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			fmt.Fprint(c, "PING\r\n")
			line, _ := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if strings.HasPrefix(line, "+PONG") {
				return addr
			}
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("redis-server on %s did not answer PING within 30 s", addr)
		}
	}
}

// lockedBuffer is a strings.Builder safe to read while it is written.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
