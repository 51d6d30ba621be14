package faultproxy_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/lockscope/lockscope/internal/testkit/faultproxy"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// client returns a go-redis client through p without retries, so each
// command's outcome is the network's, not a retry's.
func client(t *testing.T, p *faultproxy.Proxy) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, PoolSize: 4, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	return c
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestForwards(t *testing.T) {
	srv := redistest.Shared(t)
	p := faultproxy.Start(t, srv.Addr())
	c := client(t, p)
	ctx := ctxFor(t, 10*time.Second)
	key := redistest.KeyPrefix(t) + "k"
	value := strings.Repeat("v", 200<<10) // larger than one read buffer
	if err := c.Set(ctx, key, value, time.Minute).Err(); err != nil {
		t.Fatalf("SET through proxy: %v", err)
	}
	got, err := srv.Client(t).Get(ctx, key).Result()
	if err != nil || got != value {
		t.Fatalf("GET direct = %d bytes, %v; want %d bytes", len(got), err, len(value))
	}
	got, err = c.Get(ctx, key).Result()
	if err != nil || got != value {
		t.Fatalf("GET through proxy = %d bytes, %v; want %d bytes", len(got), err, len(value))
	}
	if b := p.Bytes(); b < 2*int64(len(value)) {
		t.Errorf("Bytes() = %d, want >= %d", b, 2*len(value))
	}
	if n := p.Accepted(); n < 1 {
		t.Errorf("Accepted() = %d, want >= 1", n)
	}
}

func TestLatency(t *testing.T) {
	srv := redistest.Shared(t)
	p := faultproxy.Start(t, srv.Addr())
	c := client(t, p)
	ctx := ctxFor(t, 10*time.Second)
	pingN := func(n int) error {
		pipe := c.Pipeline()
		for i := 0; i < n; i++ {
			pipe.Ping(ctx)
		}
		_, err := pipe.Exec(ctx)
		return err
	}
	// Open the pool's connections without latency: a new go-redis
	// connection costs two extra round trips (HELLO, CLIENT SETINFO).
	if err := pingN(20); err != nil {
		t.Fatal(err)
	}
	// The latency is the yardstick: each wrong answer below takes at least
	// a round trip of it more than the right one, which a loaded host
	// cannot make up for (it only adds to the right answer's time).
	const lat = 150 * time.Millisecond
	p.SetLatency(lat)
	start := time.Now()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	rtt := time.Since(start)
	t.Logf("PING with %v latency each way: %v", lat, rtt)
	if rtt < 2*lat {
		t.Errorf("PING with %v latency each way took %v, want at least a round trip of it (%v)", lat, rtt, 2*lat)
	}

	// Latency, not a bandwidth cap: 20 commands written back to back arrive
	// together, so a pipeline costs one round trip, not twenty (a queue of
	// them would take at least 40 latencies).
	start = time.Now()
	if err := pingN(20); err != nil {
		t.Fatal(err)
	}
	rtt = time.Since(start)
	t.Logf("pipeline of 20 PINGs: %v", rtt)
	if rtt < 2*lat || rtt >= 20*lat {
		t.Errorf("pipeline of 20 PINGs took %v, want one round trip (%v), not twenty (%v)", rtt, 2*lat, 40*lat)
	}

	p.SetLatency(0)
	start = time.Now()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	rtt = time.Since(start)
	t.Logf("PING after SetLatency(0): %v", rtt)
	if rtt >= 2*lat {
		t.Errorf("PING after SetLatency(0) took %v, want no delay (with one it takes %v)", rtt, 2*lat)
	}
}

func TestStallAndResume(t *testing.T) {
	srv := redistest.Shared(t)
	p := faultproxy.Start(t, srv.Addr())
	c := client(t, p)
	ctx := ctxFor(t, 10*time.Second)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	p.Stall()
	p.Stall() // idempotent
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := c.Ping(short).Err()
	elapsed := time.Since(start)
	if err == nil {
		t.Fatalf("PING while stalled = nil error, want a timeout")
	}
	// Ended by its deadline: a stall holds the connection open, it neither
	// closes it nor answers.
	t.Logf("PING while stalled returned after %v", elapsed)
	if elapsed < 150*time.Millisecond || !errors.Is(err, context.DeadlineExceeded) && !os.IsTimeout(err) {
		t.Errorf("PING while stalled returned %v after %v, want a timeout at its 200ms deadline", err, elapsed)
	}
	if p.Conns() == 0 {
		t.Errorf("Conns() = 0 while stalled, want connections kept open")
	}
	p.Resume()
	p.Resume() // idempotent
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Resume: %v", err)
	}
}

// rawPing dials the proxy and does one PING, returning the open conn.
func rawPing(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(nc)
	if _, err := nc.Write([]byte("PING\r\n")); err != nil {
		t.Fatal(err)
	}
	line, err := r.ReadString('\n')
	if err != nil || line != "+PONG\r\n" {
		t.Fatalf("raw PING = %q, %v; want +PONG", line, err)
	}
	return nc, r
}

func TestDropAll(t *testing.T) {
	srv := redistest.Shared(t)
	p := faultproxy.Start(t, srv.Addr())
	nc, r := rawPing(t, p.Addr())
	if n := p.DropAll(); n != 1 {
		t.Errorf("DropAll() = %d, want 1", n)
	}
	nc.Write([]byte("PING\r\n"))
	if line, err := r.ReadString('\n'); err == nil {
		t.Fatalf("read after DropAll = %q, want an error", line)
	}
	// The proxy still forwards new connections.
	rawPing(t, p.Addr())
}

func TestRefuse(t *testing.T) {
	srv := redistest.Shared(t)
	p := faultproxy.Start(t, srv.Addr())
	p.Refuse(true)
	nc, err := net.DialTimeout("tcp", p.Addr(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(5 * time.Second))
	nc.Write([]byte("PING\r\n"))
	b, err := io.ReadAll(nc)
	if len(b) != 0 || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("refused connection read %q, %v; want immediate close", b, err)
	}
	p.Refuse(false)
	rawPing(t, p.Addr())
}

// TestCloseLeavesNothing checks that Close ends every goroutine, including
// those of connections stalled or waiting out latency.
func TestCloseLeavesNothing(t *testing.T) {
	srv := redistest.Shared(t)
	before := goleak.IgnoreCurrent()
	p, err := faultproxy.New(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	c1, _ := rawPing(t, p.Addr())
	c2, _ := rawPing(t, p.Addr())
	got := p.Received()
	p.SetLatency(time.Hour)
	c1.Write([]byte("PING\r\n")) // waits out the latency
	redistest.WaitFor(t, 10*time.Second, "the first PING in the proxy", func() bool { return p.Received() >= got+6 })
	p.Stall()
	c2.Write([]byte("PING\r\n")) // waits on the stall
	redistest.WaitFor(t, 10*time.Second, "the second PING in the proxy", func() bool { return p.Received() >= got+12 })
	done := make(chan error, 1)
	go func() { done <- p.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Close() = %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return within 5s")
	}
	c1.Close()
	c2.Close()
	goleak.VerifyNone(t, before)
	if _, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		t.Errorf("dial after Close succeeded, want refused")
	}
}
