package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/lockscope/lockscope/internal/testkit/syncbuf"
)

// These tests build the lockscope binary and drive it as a user would: flags,
// environment, stdin, signals, exit codes, HTTP.

func TestMain(m *testing.M) { redistest.Main(m) }

// proc is a running lockscope process.
type proc struct {
	t      *testing.T
	args   []string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *syncbuf.Buffer
	stderr *syncbuf.Buffer
	done   chan struct{}
	code   int
}

// environ is the test process's environment without LOCKSCOPE_* variables
// (a developer's own settings must not leak into the tests), plus env.
func environ(env []string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LOCKSCOPE_") {
			out = append(out, kv)
		}
	}
	return append(out, env...)
}

// start runs the binary with args and env ("NAME=value"); it is killed at
// the end of the test if still running.
func start(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, args: args, stdout: &syncbuf.Buffer{}, stderr: &syncbuf.Buffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(redistest.Lockscope(t), args...)
	p.cmd.Env = environ(env)
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var err error
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start lockscope %v: %v", args, err)
	}
	go func() {
		p.cmd.Wait()
		p.code = p.cmd.ProcessState.ExitCode()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("lockscope %s\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), p.stdout, p.stderr)
		}
	})
	return p
}

// wait waits for the process to exit and returns its exit code.
func (p *proc) wait(timeout time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(timeout):
		p.cmd.Process.Signal(syscall.SIGQUIT) // goroutine dump into stderr for the failure log
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			p.cmd.Process.Kill()
			<-p.done
		}
		p.t.Fatalf("lockscope %s did not exit within %v", strings.Join(p.args, " "), timeout)
		return -1
	}
}

func (p *proc) signal(sig os.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("signal %v: %v", sig, err)
	}
}

// lockscope runs the binary to completion with stdin and returns its output and
// exit code.
func lockscope(t *testing.T, env []string, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	p := start(t, env, args...)
	io.WriteString(p.stdin, stdin)
	p.stdin.Close()
	code = p.wait(60 * time.Second)
	return p.stdout.String(), p.stderr.String(), code
}

// freeAddr returns a loopback address with a port free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	port, err := redistest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return "127.0.0.1:" + strconv.Itoa(port)
}

// get fetches url and returns the status and body.
func get(ctx context.Context, url string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// send does req and returns the response (body read and closed) and its
// body; a transport error fails the test.
func send(t *testing.T, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// apiRelease POSTs a forced release of key to the JSON API with a bearer
// token ("" for none) and returns the status and body.
func apiRelease(t *testing.T, base, key, fingerprint, reason, token string) (int, string) {
	t.Helper()
	body := fmt.Sprintf(`{"fingerprint": %q, "reason": %q}`, fingerprint, reason)
	req, _ := http.NewRequest(http.MethodPost, base+"/api/v1/locks/"+url.PathEscape(key)+"/release", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, b := send(t, req)
	return resp.StatusCode, b
}

// goTool is the go command running these tests: "go test" puts its own
// GOROOT/bin first on the test's PATH (since Go 1.19).
func goTool() string { return "go" }

// serveReady starts `lockscope serve` on a free loopback address with env
// ("NAME=value") and args, waits until /readyz answers 200, and returns its
// base URL and the process.
func serveReady(t *testing.T, env []string, args ...string) (string, *proc) {
	t.Helper()
	addr := freeAddr(t)
	base := "http://" + addr
	p := start(t, slices.Concat(env, []string{"LOCKSCOPE_LISTEN=" + addr}), slices.Concat([]string{"serve"}, args)...)
	// Generous: a race-enabled binary among many parallel tests on two
	// loaded cores can take well over 15 s to start.
	redistest.WaitFor(t, 60*time.Second, "/readyz to answer 200", func() error {
		if code, _, err := get(context.Background(), base+"/readyz"); err != nil || code != 200 {
			return fmt.Errorf("GET /readyz = %d, %v", code, err)
		}
		return nil
	})
	return base, p
}
