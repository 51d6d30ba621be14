package reliability

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/lockscope/lockscope/internal/testkit/syncbuf"
)

// proc is a running lockscope command.
type proc struct {
	cmd    *exec.Cmd
	out    syncbuf.Buffer // stdout and stderr
	done   chan struct{}
	listen string // serve: host:port of its HTTP server
}

// startLockscope runs bin with args; it is killed at the end of the test if
// still running.
func startLockscope(t testing.TB, bin string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(bin, args...), done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("lockscope %v output:\n%s", args, tail(p.out.String(), 4000))
		}
	})
	return p
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// startServe runs `lockscope serve` against redisURL on a free port and
// waits until /healthz answers.
func startServe(t testing.TB, bin, redisURL string, env []string, args ...string) *proc {
	t.Helper()
	port, err := redistest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return startServeOn(t, bin, redisURL, "127.0.0.1:"+strconv.Itoa(port), env, args...)
}

// startServeOn is startServe on a given listen address (a restarted replica
// keeps its address, hence its default replica name).
func startServeOn(t testing.TB, bin, redisURL, listen string, env []string, args ...string) *proc {
	t.Helper()
	p := startLockscope(t, bin, env, append([]string{"serve", "--redis", redisURL, "--listen", listen, "--log-level", "warn"}, args...)...)
	p.listen = listen
	ctx := testCtx(t, 20*time.Second)
	if !redistest.Poll(ctx, func() bool {
		select {
		case <-p.done:
			return true
		default:
		}
		resp, err := http.Get("http://" + listen + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}) {
		t.Fatalf("lockscope serve did not answer /healthz within 20s:\n%s", p.out.String())
	}
	select {
	case <-p.done:
		t.Fatalf("lockscope serve exited: %v\n%s", p.cmd.ProcessState, p.out.String())
	default:
	}
	return p
}

func (p *proc) url(path string) string { return "http://" + p.listen + path }

// metrics scrapes the process's /metrics.
func (p *proc) metrics(ctx context.Context, t *testing.T) families {
	t.Helper()
	m, body, err := scrape(ctx, p.url("/metrics"))
	if err != nil {
		t.Fatalf("%v\n%s", err, tail(string(body), 2000))
	}
	return m
}

// kill sends SIGKILL and waits for the process to die.
func (p *proc) kill(t testing.TB) {
	t.Helper()
	p.cmd.Process.Kill()
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Fatal("process did not die within 10s of SIGKILL")
	}
}

// stop sends SIGTERM and waits up to d for a clean exit.
func (p *proc) stop(t *testing.T, d time.Duration) {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(d):
		t.Fatalf("process did not exit within %v of SIGTERM", d)
	}
	if !p.cmd.ProcessState.Success() {
		t.Errorf("lockscope exited with %v:\n%s", p.cmd.ProcessState, tail(p.out.String(), 2000))
	}
}

var _ = fmt.Sprint
