package redistest

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Options configures a server. The zero value is a standalone server with
// keyspace notifications on ("KEA").
type Options struct {
	// Notify is the notify-keyspace-events setting; "" means "KEA" and
	// "none" turns notifications off.
	Notify string
	// Args are extra redis-server arguments, e.g. "--maxmemory", "10mb".
	Args []string
	// Port is the port to listen on; 0 picks a free one.
	Port int
	// TLS, when set, makes the server speak TLS only (on Port) and require
	// a client certificate signed by TLS.CACert.
	TLS *TLSFiles
}

// Server is one redis-server process on 127.0.0.1.
type Server struct {
	opts Options
	port int
	dir  string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Binary returns the path of redis-server or an error that says how to get it.
func Binary() (string, error) {
	p, err := exec.LookPath("redis-server")
	if err != nil {
		return "", errors.New("redistest: redis-server not found in PATH: install it (apt-get install -y --no-install-recommends redis-server)")
	}
	return p, nil
}

// New starts a server and returns it. The caller must Close it.
func New(opts Options) (*Server, error) {
	dir, err := os.MkdirTemp("", "redistest-")
	if err != nil {
		return nil, err
	}
	s := &Server{opts: opts, dir: dir, port: opts.Port}
	if s.port == 0 {
		if s.port, err = FreePort(); err != nil {
			return nil, err
		}
	}
	if err := s.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// Start launches tb's own server, closed at the end of the test.
func Start(tb testing.TB, opts Options) *Server {
	tb.Helper()
	s, err := New(opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

var (
	sharedOnce sync.Once
	shared     *Server
	sharedErr  error
)

// Shared returns the test binary's shared server, starting it on first use.
// Tests sharing it must use unique keys (for example KeyPrefix(t)). Call
// Main from TestMain to stop it when the tests end; the server is also
// killed if the test process dies.
func Shared(tb testing.TB) *Server {
	tb.Helper()
	sharedOnce.Do(func() { shared, sharedErr = New(Options{}) })
	if sharedErr != nil {
		tb.Fatal(sharedErr)
	}
	return shared
}

// Main runs the tests of a package and then stops its shared server and
// removes the lockscope binary Lockscope built:
//
//	func TestMain(m *testing.M) { redistest.Main(m) }
func Main(m *testing.M) {
	code := m.Run()
	if shared != nil {
		shared.Close()
	}
	removeLockscope()
	os.Exit(code)
}

// Addr returns host:port.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// Port returns the TCP port.
func (s *Server) Port() int { return s.port }

// URL returns a redis:// URL for the server (rediss:// with TLS).
func (s *Server) URL() string {
	if s.opts.TLS != nil {
		return "rediss://" + s.Addr()
	}
	return "redis://" + s.Addr()
}

// Client returns a new go-redis client for the server, closed at the end of
// the test.
func (s *Server) Client(tb testing.TB) *redis.Client {
	tb.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), TLSConfig: s.clientTLS()})
	tb.Cleanup(func() { c.Close() })
	return c
}

func (s *Server) args() []string {
	notify := s.opts.Notify
	switch notify {
	case "":
		notify = "KEA"
	case "none":
		notify = ""
	}
	a := []string{"--port", strconv.Itoa(s.port)}
	if s.opts.TLS != nil {
		a = s.opts.TLS.serverArgs(s.port, slices.Contains(s.opts.Args, "--cluster-enabled"))
	}
	a = append(a,
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", s.dir,
		"--notify-keyspace-events", notify,
		"--loglevel", "warning",
		"--logfile", filepath.Join(s.dir, "redis.log"),
	)
	return append(a, s.opts.Args...)
}

// Start (re)starts a stopped server on the same port.
func (s *Server) Start() error {
	bin, err := Binary()
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return errors.New("redistest: already running")
	}
	cmd := exec.Command(bin, s.args()...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("redistest: start redis-server: %w", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	if err := waitReady(s.Addr(), s.clientTLS(), done, startTimeout); err != nil {
		cmd.Process.Kill()
		<-done
		log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
		return fmt.Errorf("redistest: redis-server on %s: %w; log:\n%s", s.Addr(), err, log)
	}
	s.cmd, s.done = cmd, done
	return nil
}

// Stop kills the server (SIGKILL: no save, clients see connection errors).
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Kill()
	<-s.done
	s.cmd, s.done = nil, nil
}

// Pause stops the server's process (SIGSTOP): it answers nothing, reads
// nothing from its master, until Resume. A paused replica misses what its
// master writes once the master drops the link (CLIENT KILL TYPE replica).
func (s *Server) Pause() error { return s.signal(syscall.SIGSTOP) }

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() error { return s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return errors.New("redistest: not running")
	}
	return s.cmd.Process.Signal(sig)
}

// Restart stops and starts the server on the same port. Data is lost: the
// server persists nothing.
func (s *Server) Restart() error {
	s.Stop()
	return s.Start()
}

// Close stops the server and removes its directory.
func (s *Server) Close() {
	s.Stop()
	os.RemoveAll(s.dir)
}

// clientTLS is what a client needs to reach the server: nil without TLS.
func (s *Server) clientTLS() *tls.Config {
	if s.opts.TLS == nil {
		return nil
	}
	return s.opts.TLS.ClientConfig()
}

// startTimeout bounds a redis-server's start-up. It starts in milliseconds;
// only a start that failed waits this long, so the bound is no guess at the
// host's speed: on this project's shared 2-core machine, at load average 25,
// a start once took more than 10 s without writing a line of its log.
const startTimeout = time.Minute

func waitReady(addr string, tlsConfig *tls.Config, exited <-chan struct{}, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return errors.New("exited during start-up")
		default:
		}
		if ping(addr, tlsConfig) == nil {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("not answering PING after %v", timeout)
}

func ping(addr string, tlsConfig *tls.Config) error {
	var c net.Conn
	var err error
	if tlsConfig != nil {
		c, err = tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", addr, tlsConfig)
	} else {
		c, err = net.DialTimeout("tcp", addr, time.Second)
	}
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("PING answered %q", strings.TrimSpace(line))
	}
	return nil
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// KeyPrefix returns a prefix unique to the test, for tests sharing a server.
func KeyPrefix(tb testing.TB) string {
	return "test:" + tb.Name() + ":" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
}

// Cluster is a 3-master Redis Cluster on loopback, no replicas.
type Cluster struct {
	Nodes []*Server
	tls   *TLSFiles
}

// StartCluster starts a 3-master cluster, closed at the end of the test.
func StartCluster(tb testing.TB) *Cluster {
	tb.Helper()
	return StartClusterWith(tb, Options{})
}

// StartClusterWith starts a 3-master cluster whose nodes have opts (Args are
// added to the Cluster's own; Port is ignored), closed at the end of the
// test. With opts.TLS, clients and the Cluster bus speak TLS.
func StartClusterWith(tb testing.TB, opts Options) *Cluster {
	tb.Helper()
	c, err := newCluster(opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	return c
}

// NewCluster starts a 3-master cluster. The caller must Close it.
func NewCluster() (*Cluster, error) { return newCluster(Options{}) }

func newCluster(opts Options) (*Cluster, error) {
	c := &Cluster{tls: opts.TLS}
	for i := 0; i < 3; i++ {
		port, err := freeClusterPort()
		if err != nil {
			c.Close()
			return nil, err
		}
		node := opts
		node.Port = port
		node.Args = append([]string{
			"--cluster-enabled", "yes",
			"--cluster-node-timeout", "5000",
		}, opts.Args...)
		s, err := New(node)
		if err != nil {
			c.Close()
			return nil, err
		}
		c.Nodes = append(c.Nodes, s)
	}
	if err := c.form(); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// freeClusterPort finds a port p with p and its cluster bus port p+10000 free.
func freeClusterPort() (int, error) {
	for i := 0; i < 100; i++ {
		p, err := FreePort()
		if err != nil {
			return 0, err
		}
		if p+10000 > 65535 {
			continue
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p+10000))
		if err != nil {
			continue
		}
		l.Close()
		return p, nil
	}
	return 0, errors.New("redistest: no free port pair for a cluster node")
}

func (c *Cluster) form() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const slots = 16384
	var clients []*redis.Client
	defer func() {
		for _, cl := range clients {
			cl.Close()
		}
	}()
	for i, n := range c.Nodes {
		cl := redis.NewClient(&redis.Options{Addr: n.Addr(), TLSConfig: n.clientTLS()})
		clients = append(clients, cl)
		lo, hi := i*slots/len(c.Nodes), (i+1)*slots/len(c.Nodes)-1
		if err := cl.ClusterAddSlotsRange(ctx, lo, hi).Err(); err != nil {
			return fmt.Errorf("redistest: cluster addslots on %s: %w", n.Addr(), err)
		}
	}
	for _, n := range c.Nodes[1:] {
		if err := clients[0].ClusterMeet(ctx, "127.0.0.1", strconv.Itoa(n.port)).Err(); err != nil {
			return fmt.Errorf("redistest: cluster meet %s: %w", n.Addr(), err)
		}
	}
	for {
		ok := true
		for _, cl := range clients {
			info, err := cl.ClusterInfo(ctx).Result()
			if err != nil || !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_known_nodes:3") {
				ok = false
				break
			}
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.New("redistest: cluster did not reach state ok within 30s")
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Addrs returns the nodes' addresses.
func (c *Cluster) Addrs() []string {
	var a []string
	for _, n := range c.Nodes {
		a = append(a, n.Addr())
	}
	return a
}

// Client returns a cluster client, closed at the end of the test.
func (c *Cluster) Client(tb testing.TB) *redis.ClusterClient {
	tb.Helper()
	opt := &redis.ClusterOptions{Addrs: c.Addrs()}
	if c.tls != nil {
		opt.TLSConfig = c.tls.ClientConfig()
	}
	cl := redis.NewClusterClient(opt)
	tb.Cleanup(func() { cl.Close() })
	return cl
}

// Close stops every node.
func (c *Cluster) Close() {
	for _, n := range c.Nodes {
		n.Close()
	}
}
