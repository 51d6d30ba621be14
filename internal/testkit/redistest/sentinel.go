package redistest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// SentinelMaster is the master name a Sentinel set monitors.
const SentinelMaster = "mymaster"

// Sentinel is a master, its replica and two Sentinels (quorum 1) on
// 127.0.0.1: what a failover needs.
type Sentinel struct {
	Master, Replica *Server
	ports           []int
	cmds            []*exec.Cmd
	done            []chan struct{}
	tls             *TLSFiles
	dir             string
	old             string // the master before the last Failover
}

// StartSentinel starts a Sentinel set, closed at the end of the test. It
// returns once both Sentinels know the replica (a failover can happen).
func StartSentinel(tb testing.TB) *Sentinel {
	tb.Helper()
	return StartSentinelWith(tb, Options{})
}

// StartSentinelWith starts a Sentinel set whose master and replica have opts
// (Port is ignored). With opts.TLS, the Sentinels, the master and the
// replica speak TLS only, to clients and to each other.
func StartSentinelWith(tb testing.TB, opts Options) *Sentinel {
	tb.Helper()
	s, err := newSentinel(opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Close)
	return s
}

func newSentinel(opts Options) (*Sentinel, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	opts.Port = 0
	s := &Sentinel{tls: opts.TLS}
	if s.Master, err = New(opts); err != nil {
		return nil, err
	}
	replica := opts
	replica.Args = append([]string{"--replicaof", "127.0.0.1", strconv.Itoa(s.Master.Port())}, opts.Args...)
	if s.Replica, err = New(replica); err != nil {
		s.Close()
		return nil, err
	}
	if s.dir, err = os.MkdirTemp("", "redistest-sentinel-"); err != nil {
		s.Close()
		return nil, err
	}
	for i := range 2 {
		port, err := FreePort()
		if err != nil {
			s.Close()
			return nil, err
		}
		conf := filepath.Join(s.dir, "sentinel"+strconv.Itoa(i)+".conf")
		listen := fmt.Sprintf("port %d\n", port)
		if s.tls != nil {
			listen = fmt.Sprintf("port 0\ntls-port %d\n", port) + s.tls.sentinelConf()
		}
		text := listen + fmt.Sprintf(`bind 127.0.0.1
dir %s
logfile %s
sentinel monitor %s 127.0.0.1 %d 1
sentinel down-after-milliseconds %s 1000
sentinel failover-timeout %s 4000
sentinel parallel-syncs %s 1
`, s.dir, filepath.Join(s.dir, "sentinel"+strconv.Itoa(i)+".log"), SentinelMaster, s.Master.Port(), SentinelMaster, SentinelMaster, SentinelMaster)
		if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
			s.Close()
			return nil, err
		}
		cmd := exec.Command(bin, conf, "--sentinel")
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			s.Close()
			return nil, err
		}
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		s.cmds, s.done, s.ports = append(s.cmds, cmd), append(s.done, done), append(s.ports, port)
		if err := waitReady("127.0.0.1:"+strconv.Itoa(port), s.clientTLS(), done, startTimeout); err != nil {
			s.Close()
			return nil, fmt.Errorf("redistest: sentinel: %w", err)
		}
	}
	// Sentinels learn of replicas from the master's INFO, every 10s.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, addr := range s.Addrs() {
		sc := s.sentinelClient(addr)
		for {
			r, err := sc.Replicas(ctx, SentinelMaster).Result()
			if err == nil && len(r) > 0 {
				break
			}
			if ctx.Err() != nil {
				sc.Close()
				s.Close()
				return nil, errors.New("redistest: sentinel did not discover the replica within 30s")
			}
			time.Sleep(200 * time.Millisecond)
		}
		sc.Close()
	}
	return s, nil
}

// Addrs are the Sentinels' addresses.
func (s *Sentinel) Addrs() []string {
	var out []string
	for _, p := range s.ports {
		out = append(out, "127.0.0.1:"+strconv.Itoa(p))
	}
	return out
}

// URL is the go-redis Sentinel URL of the set (rediss:// with TLS).
func (s *Sentinel) URL() string {
	a := s.Addrs()
	scheme := "redis://"
	if s.tls != nil {
		scheme = "rediss://"
	}
	return scheme + a[0] + "?master_name=" + SentinelMaster + "&addr=" + a[1]
}

func (s *Sentinel) clientTLS() *tls.Config {
	if s.tls == nil {
		return nil
	}
	return s.tls.ClientConfig()
}

func (s *Sentinel) sentinelClient(addr string) *redis.SentinelClient {
	return redis.NewSentinelClient(&redis.Options{Addr: addr, TLSConfig: s.clientTLS()})
}

// Failover makes the replica the master and waits until the first Sentinel
// names the new master: what a client that asks it sees.
func (s *Sentinel) Failover(ctx context.Context) error {
	sc := s.sentinelClient(s.Addrs()[0])
	defer sc.Close()
	before, err := sc.GetMasterAddrByName(ctx, SentinelMaster).Result()
	if err != nil {
		return err
	}
	if err := sc.Failover(ctx, SentinelMaster).Err(); err != nil {
		return err
	}
	s.old = net.JoinHostPort(before[0], before[1])
	return settle(ctx, "failover did not complete", func() bool {
		now, err := sc.GetMasterAddrByName(ctx, SentinelMaster).Result()
		return err == nil && now[1] != before[1]
	})
}

// Settled waits, after Failover, until every Sentinel names the new master
// (go-redis asks them all and takes the first answer: one that has not heard
// yet names the old master) and the old master replicates from the new one.
// Until then a new client may still reach the old master.
func (s *Sentinel) Settled(ctx context.Context) error {
	var scs []*redis.SentinelClient
	for _, a := range s.Addrs() {
		c := s.sentinelClient(a)
		defer c.Close()
		scs = append(scs, c)
	}
	old := redis.NewClient(&redis.Options{Addr: s.old, TLSConfig: s.clientTLS()})
	defer old.Close()
	return settle(ctx, "failover did not settle", func() bool {
		var master string
		for _, c := range scs {
			m, err := c.GetMasterAddrByName(ctx, SentinelMaster).Result()
			if err != nil || net.JoinHostPort(m[0], m[1]) == s.old || (master != "" && m[1] != master) {
				return false
			}
			master = m[1]
		}
		info, err := old.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "role:slave") && strings.Contains(info, "master_port:"+master+"\r") &&
			strings.Contains(info, "master_link_status:up")
	})
}

// settle waits for done, polling, until ctx ends.
func settle(ctx context.Context, what string, done func() bool) error {
	if !Poll(ctx, done) {
		return fmt.Errorf("redistest: %s: %w", what, ctx.Err())
	}
	return nil
}

// Close stops everything.
func (s *Sentinel) Close() {
	for i, c := range s.cmds {
		c.Process.Kill()
		<-s.done[i]
	}
	s.cmds, s.done = nil, nil
	if s.Replica != nil {
		s.Replica.Close()
	}
	if s.Master != nil {
		s.Master.Close()
	}
	if s.dir != "" {
		os.RemoveAll(s.dir)
	}
}
