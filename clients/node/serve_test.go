package node

import (
	"bufio"
	"context"
	"io"
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
)

func startServe(t testing.TB, redisURL string) *serve { return clienttest.StartServe(t, redisURL) }

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
