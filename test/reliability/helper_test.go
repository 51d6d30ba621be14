package reliability

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"testing"
	"time"
)

// Helper processes: the test binary re-executed with helperEnv set runs one
// of these instead of the tests, so a test can pause (SIGSTOP) or kill
// (SIGKILL) a lock holder as a real process, not a goroutine.
const (
	helperEnv    = "LOCKSCOPE_RELIABILITY_HELPER"
	helperConfig = "LOCKSCOPE_RELIABILITY_CONFIG"
)

var helpers = map[string]func(ctx context.Context, cfg []byte) (any, error){
	"holder": holderMain,
}

// runHelper runs helper name until SIGTERM and prints its result as JSON.
func runHelper(name string) int {
	main, ok := helpers[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "unknown helper %q\n", name)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	res, err := main(ctx, []byte(os.Getenv(helperConfig)))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	json.NewEncoder(os.Stdout).Encode(res)
	return 0
}

// helperProc is a running helper.
type helperProc struct {
	cmd            *exec.Cmd
	stdout, stderr bytes.Buffer
	done           chan struct{}
}

// startHelper starts helper name with cfg (JSON) in a child process, killed
// at the end of the test if still running.
func startHelper(t *testing.T, name string, cfg any) *helperProc {
	t.Helper()
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p := &helperProc{done: make(chan struct{})}
	p.cmd = exec.Command(os.Args[0], "-test.run=^$")
	p.cmd.Env = append(os.Environ(), helperEnv+"="+name, helperConfig+"="+string(b))
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.cmd.Process.Signal(syscall.SIGCONT)
		p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

// stop sends SIGCONT then SIGTERM and waits up to d for a clean exit,
// decoding the helper's result into res.
func (p *helperProc) stop(t *testing.T, d time.Duration, res any) {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGCONT)
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(d):
		p.cmd.Process.Kill()
		<-p.done
		t.Fatalf("helper %d did not exit within %v of SIGTERM; stderr:\n%s", p.cmd.Process.Pid, d, p.stderr.String())
	}
	if !p.cmd.ProcessState.Success() {
		t.Fatalf("helper %d exited with %v; stderr:\n%s", p.cmd.Process.Pid, p.cmd.ProcessState, p.stderr.String())
	}
	if res != nil {
		if err := json.Unmarshal(p.stdout.Bytes(), res); err != nil {
			t.Fatalf("helper result %q: %v", p.stdout.String(), err)
		}
	}
}

func (p *helperProc) signal(sig syscall.Signal) error { return p.cmd.Process.Signal(sig) }
