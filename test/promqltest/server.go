package promqltest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/lockscope/lockscope/internal/testkit/syncbuf"
)

// Server is a real Prometheus server run by a test.
type Server struct {
	Base string // http://127.0.0.1:port
	out  *syncbuf.Buffer
}

// StartServer runs prometheus with the configuration file config, its
// storage in a temporary directory and flags added (such as
// --enable-feature=exemplar-storage), on a free loopback port, and waits
// until it is ready. It is stopped when tb ends.
func StartServer(tb testing.TB, config string, flags ...string) *Server {
	tb.Helper()
	port, err := redistest.FreePort()
	if err != nil {
		tb.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	out := &syncbuf.Buffer{}
	cmd := exec.Command(Binary(tb, "prometheus"), append([]string{
		"--config.file=" + config,
		"--storage.tsdb.path=" + filepath.Join(tb.TempDir(), "data"),
		"--web.listen-address=" + addr,
		"--log.level=warn",
	}, flags...)...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start prometheus: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	p := &Server{Base: "http://" + addr, out: out}
	tb.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	})
	// Generous: Prometheus replays its (empty) WAL and loads its rules
	// first, which takes seconds on a loaded host.
	redistest.WaitFor(tb, time.Minute, "prometheus to be ready", func() error {
		select {
		case err := <-exited:
			tb.Fatalf("prometheus exited: %v\n%s", err, p.Logs())
		default:
		}
		resp, err := http.Get(p.Base + "/-/ready")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET /-/ready = %s\n%s", resp.Status, p.Logs())
		}
		return nil
	})
	return p
}

// Logs returns what the server printed.
func (p *Server) Logs() string {
	return "prometheus output:\n" + p.out.String()
}

// Get fetches an API path and decodes its data into data; a request that
// fails or does not succeed fails tb.
func (p *Server) Get(tb testing.TB, path string, data any) {
	tb.Helper()
	if err := p.TryGet(path, data); err != nil {
		tb.Fatalf("%v\n%s", err, p.Logs())
	}
}

// TryGet is Get returning the error, for polls.
func (p *Server) TryGet(path string, data any) error {
	resp, err := http.Get(p.Base + path)
	if err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var env struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(b, &env); err != nil || env.Status != "success" {
		return fmt.Errorf("GET %s = %s %s, want status success (%w)", path, resp.Status, b, errors.Join(err, errors.New(env.Error)))
	}
	if err := json.Unmarshal(env.Data, data); err != nil {
		return fmt.Errorf("GET %s: decode %s: %w", path, env.Data, err)
	}
	return nil
}
