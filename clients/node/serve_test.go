package node

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

// serve is a running `lockscope serve`.
type serve struct {
	t      testing.TB
	listen string
}

// startServe runs lockscope serve against redisURL until the test ends.
func startServe(t testing.TB, redisURL string) *serve {
	t.Helper()
	port, err := redistest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	s := &serve{t: t, listen: "127.0.0.1:" + strconv.Itoa(port)}
	cmd := exec.Command(redistest.Lockscope(t), "serve", "--redis", redisURL, "--listen", s.listen, "--log-level", "warn")
	var out strings.Builder
	var mu sync.Mutex
	cmd.Stdout = writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return out.Write(p) })
	cmd.Stderr = cmd.Stdout
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
		if t.Failed() {
			mu.Lock()
			t.Logf("lockscope serve output:\n%s", out.String())
			mu.Unlock()
		}
	})
	redistest.WaitFor(t, 30*time.Second, "lockscope serve to answer /readyz", func() bool {
		select {
		case <-done:
			t.Fatalf("lockscope serve exited: %v", cmd.ProcessState)
		default:
		}
		resp, err := http.Get(s.url("/readyz"))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return s
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func (s *serve) url(path string) string { return "http://" + s.listen + path }

// get fetches path; JSON answers are decoded into v, others returned.
func (s *serve) get(path string, v any) string {
	s.t.Helper()
	resp, err := http.Get(s.url(path))
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		s.t.Fatalf("GET %s = %s: %s", path, resp.Status, b)
	}
	if v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			s.t.Fatalf("GET %s: %v\n%s", path, err, b)
		}
	}
	return string(b)
}

// metric sums the samples of a metric family on /metrics whose labels
// include match.
func (s *serve) metric(name string, match map[string]string) float64 {
	s.t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(s.get("/metrics", nil)))
	if err != nil {
		s.t.Fatalf("/metrics: %v", err)
	}
	var sum float64
	f := fams[name]
	if f == nil {
		return 0
	}
next:
	for _, m := range f.Metric {
		labels := map[string]string{}
		for _, l := range m.Label {
			labels[l.GetName()] = l.GetValue()
		}
		for k, v := range match {
			if labels[k] != v {
				continue next
			}
		}
		switch {
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		}
	}
	return sum
}

// histogram returns the sample count and sum of a histogram family on
// /metrics over the samples whose labels include match.
func (s *serve) histogram(name string, match map[string]string) (count uint64, sum float64) {
	s.t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(s.get("/metrics", nil)))
	if err != nil {
		s.t.Fatalf("/metrics: %v", err)
	}
	f := fams[name]
	if f == nil {
		return 0, 0
	}
next:
	for _, m := range f.Metric {
		labels := map[string]string{}
		for _, l := range m.Label {
			labels[l.GetName()] = l.GetValue()
		}
		for k, v := range match {
			if labels[k] != v {
				continue next
			}
		}
		if h := m.Histogram; h != nil {
			count += h.GetSampleCount()
			sum += h.GetSampleSum()
		}
	}
	return count, sum
}

// lockDetail is what the tests read of GET /api/v1/locks/{key}.
type lockDetail struct {
	Class        string `json:"class"`
	Held         bool   `json:"held"`
	Owner        string `json:"owner"`
	Lease        string `json:"lease"`
	Acquisitions int64  `json:"acquisitions"`
	Contentions  int64  `json:"contentions"`
	Failures     int64  `json:"failures"`
	Waiters      int    `json:"waiters"`
	Wait         struct {
		Count int64   `json:"count"`
		Sum   float64 `json:"sum_seconds"`
	} `json:"wait"`
	Redis *struct {
		Owner   string `json:"owner"`
		Lease   string `json:"lease"`
		Foreign bool   `json:"foreign"`
	} `json:"redis_holder"`
	Recent []struct {
		Type     string  `json:"type"`
		Owner    string  `json:"owner"`
		Lease    string  `json:"lease"`
		Reason   string  `json:"reason"`
		Holder   string  `json:"holder"`
		Attempts int     `json:"attempts"`
		TTL      float64 `json:"ttl_seconds"`
		Wait     float64 `json:"wait_seconds"`
		Headroom float64 `json:"headroom_seconds"`
		By       string  `json:"by"`
	} `json:"recent"`
	WaitersNow []waiterJSON `json:"waiters_now"`
}

type waiterJSON struct {
	Owner   string   `json:"owner"`
	Lease   string   `json:"lease"`
	Holder  string   `json:"holder_seen"`
	Holds   []string `json:"holds_leases"`
	Waiting float64  `json:"waiting_seconds"`
}

// incident is what the tests read of GET /api/v1/incidents.
type incident struct {
	Kind    string   `json:"kind"`
	Keys    []string `json:"keys"`
	Owners  []string `json:"owners"`
	EndedBy string   `json:"ended_by"`
}

func (s *serve) incidents() []incident {
	s.t.Helper()
	var v struct{ Incidents []incident }
	s.get("/api/v1/incidents", &v)
	return v.Incidents
}

// lock reads key's detail. A key none of whose events serve has applied
// yet is a 404 to a viewer (no oracle for what Redis holds): that reads as
// an empty detail, so a caller polling for the key's events keeps polling.
func (s *serve) lock(key string) lockDetail {
	s.t.Helper()
	var d lockDetail
	path := "/api/v1/locks/" + url.PathEscape(key)
	resp, err := http.Get(s.url(path))
	if err != nil {
		s.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return d
	}
	s.get(path, &d)
	return d
}

// recentSteps lists a key's recent events, oldest first, as "type owner"
// (plus ":reason" and " holder" when set).
func (d lockDetail) recentSteps() []string {
	var out []string
	for i := len(d.Recent) - 1; i >= 0; i-- {
		e := d.Recent[i]
		s := e.Type + " " + e.Owner
		if e.Reason != "" {
			s += ":" + e.Reason
		}
		if e.Holder != "" {
			s += " <- " + e.Holder
		}
		out = append(out, s)
	}
	return out
}

// nodeProc is a running Node process whose output lines are read as they
// come, and whose stdin the test writes.
type nodeProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	done  chan struct{}
	mu    sync.Mutex
	out   []string
}

// startNode runs a Node script of this package (node args...) until the
// test ends.
func startNode(ctx context.Context, t testing.TB, args ...string) *nodeProc {
	t.Helper()
	p := &nodeProc{cmd: nodeCmd(ctx, t, args...), lines: make(chan string, 100), done: make(chan struct{})}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	p.cmd.Stderr = &stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.mu.Lock()
			p.out = append(p.out, sc.Text())
			p.mu.Unlock()
			p.lines <- sc.Text()
		}
		p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("node %v:\nstdout: %s\nstderr: %s", args, strings.Join(p.output(), "\n"), stderr.String())
		}
	})
	return p
}

func (p *nodeProc) output() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.out...)
}

// expect waits for a line starting with prefix and returns it.
func (p *nodeProc) expect(t testing.TB, prefix string, within time.Duration) string {
	t.Helper()
	timer := time.NewTimer(within)
	defer timer.Stop()
	for {
		select {
		case l := <-p.lines:
			if strings.HasPrefix(l, prefix) {
				return l
			}
		case <-p.done:
			// Every line was queued before done closed: those not read
			// yet may hold the one wanted.
			for {
				select {
				case l := <-p.lines:
					if strings.HasPrefix(l, prefix) {
						return l
					}
					continue
				default:
				}
				break
			}
			t.Fatalf("node exited (%v) before printing %q", p.cmd.ProcessState, prefix)
		case <-timer.C:
			t.Fatalf("node printed no %q within %v", prefix, within)
		}
	}
}

// say writes a line to the process's stdin.
func (p *nodeProc) say(t testing.TB, line string) {
	t.Helper()
	if _, err := io.WriteString(p.stdin, line+"\n"); err != nil {
		t.Fatalf("write to node: %v", err)
	}
}

// kill ends the process with SIGKILL, as a crash would, and waits for it.
func (p *nodeProc) kill(t testing.TB) {
	t.Helper()
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-p.done
}

// wait waits for the process to exit successfully.
func (p *nodeProc) wait(t testing.TB, within time.Duration) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(within):
		t.Fatalf("node did not exit within %v", within)
	}
	if !p.cmd.ProcessState.Success() {
		t.Fatalf("node exited with %v", p.cmd.ProcessState)
	}
}
