package python

import (
	"bufio"
	"context"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockscope/lockscope/clients/internal/clienttest"
)

// The serve harness is the one the Python and Node packages share.
type (
	serve      = clienttest.Serve
	lockDetail = clienttest.LockDetail
	waiterJSON = clienttest.WaiterJSON
)

func startServe(t testing.TB, redisURL string) *serve { return clienttest.StartServe(t, redisURL) }

// pyProc is a running Python process whose output lines are read as they
// come.
type pyProc struct {
	cmd   *exec.Cmd
	lines chan string
	done  chan struct{}
	mu    sync.Mutex
	out   []string
}

func startPython(ctx context.Context, t testing.TB, args ...string) *pyProc {
	t.Helper()
	p := &pyProc{cmd: pythonCmd(ctx, t, args...), lines: make(chan string, 100), done: make(chan struct{})}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
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
			t.Logf("python %v:\nstdout: %s\nstderr: %s", args, strings.Join(p.output(), "\n"), stderr.String())
		}
	})
	return p
}

func (p *pyProc) output() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.out...)
}

// expect waits for a line starting with prefix and returns it.
func (p *pyProc) expect(t testing.TB, prefix string, within time.Duration) string {
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
			t.Fatalf("python exited (%v) before printing %q", p.cmd.ProcessState, prefix)
		case <-timer.C:
			t.Fatalf("python printed no %q within %v", prefix, within)
		}
	}
}

// wait waits for the process to exit successfully.
func (p *pyProc) wait(t testing.TB, within time.Duration) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(within):
		t.Fatalf("python did not exit within %v", within)
	}
	if !p.cmd.ProcessState.Success() {
		t.Fatalf("python exited with %v", p.cmd.ProcessState)
	}
}
