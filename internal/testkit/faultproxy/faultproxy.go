// Package faultproxy is a TCP proxy on loopback that puts network faults
// between clients and a server (Redis, in lockscope's tests): latency,
// stalls (connections stay open but no byte moves), dropped connections and
// refused connections. Faults are switched on and off while traffic flows, so
// a test can show what a client does when the network misbehaves and that it
// recovers when the network heals.
package faultproxy

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy forwards every connection accepted on Addr to the target.
type Proxy struct {
	target string
	ln     net.Listener

	mu      sync.Mutex
	latency time.Duration
	stall   chan struct{} // non-nil while stalled; closed by Resume
	refuse  bool
	conns   map[*pair]struct{}
	closed  bool

	wg       sync.WaitGroup
	accepted atomic.Int64
	bytes    atomic.Int64
	received atomic.Int64
}

// New listens on a free loopback port and forwards to target (host:port).
// The caller must Close it.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{target: target, ln: ln, conns: make(map[*pair]struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Start is New for tests: it fails tb on error and closes the proxy when the
// test ends.
func Start(tb testing.TB, target string) *Proxy {
	tb.Helper()
	p, err := New(target)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { p.Close() })
	return p
}

// Addr returns the proxy's host:port; point clients here.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetLatency delays every chunk of bytes by d in each direction, so a
// request/response round trip takes at least 2d longer. Chunks stay in
// order and are pipelined: latency, not a bandwidth limit. 0 turns it off;
// bytes already in flight keep the delay they were read with.
func (p *Proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	p.latency = d
	p.mu.Unlock()
}

// Stall stops forwarding in both directions on every connection, current
// and new, until Resume. Connections stay open and new ones are accepted, as
// with a black-holed network path: clients see only silence, never an error.
func (p *Proxy) Stall() {
	p.mu.Lock()
	if p.stall == nil {
		p.stall = make(chan struct{})
	}
	p.mu.Unlock()
}

// Resume ends a Stall; held bytes flow again.
func (p *Proxy) Resume() {
	p.mu.Lock()
	if p.stall != nil {
		close(p.stall)
		p.stall = nil
	}
	p.mu.Unlock()
}

// Refuse makes the proxy close new connections at once (on) or forward them
// again (off). Existing connections are not touched; see DropAll.
func (p *Proxy) Refuse(on bool) {
	p.mu.Lock()
	p.refuse = on
	p.mu.Unlock()
}

// DropAll closes every open connection on both sides with a reset, as when
// a server or a middlebox dies. It returns how many it closed.
func (p *Proxy) DropAll() int {
	p.mu.Lock()
	var ps []*pair
	for c := range p.conns {
		ps = append(ps, c)
	}
	p.mu.Unlock()
	for _, c := range ps {
		c.reset()
	}
	return len(ps)
}

// Conns returns the number of open proxied connections.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Accepted returns the number of connections accepted since New.
func (p *Proxy) Accepted() int64 { return p.accepted.Load() }

// Bytes returns the number of bytes forwarded, both directions together
// (including a write in progress, so it is never behind what either side
// has received).
func (p *Proxy) Bytes() int64 { return p.bytes.Load() }

// Received returns the number of bytes read from either side, forwarded or
// still held (by latency or a stall): a test waits for it to know that what
// it wrote is in the proxy's hands.
func (p *Proxy) Received() int64 { return p.received.Load() }

// Close stops listening, closes every connection and waits for the proxy's
// goroutines to end.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.DropAll()
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Temporary accept errors (EMFILE): back off instead of spinning.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		p.accepted.Add(1)
		p.mu.Lock()
		refuse, closed := p.refuse, p.closed
		p.mu.Unlock()
		if refuse || closed {
			c.Close()
			continue
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		client.Close()
		return
	}
	c := &pair{client: client, server: server, done: make(chan struct{})}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		c.close()
		return
	}
	p.conns[c] = struct{}{}
	p.mu.Unlock()

	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(c, server, client) }()
	go func() { defer wg.Done(); p.pipe(c, client, server) }()
	wg.Wait()
	c.close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// gate returns the channel to wait on while stalled, or nil.
func (p *Proxy) gate() (time.Duration, chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.latency, p.stall
}

type chunk struct {
	b   []byte
	due time.Time
}

// pipe copies src to dst through a queue of timestamped chunks, so latency
// delays each chunk without serialising them. It returns when either side
// fails or the pair is closed, and closes the pair so its twin returns too.
func (p *Proxy) pipe(c *pair, dst, src net.Conn) {
	q := make(chan chunk, 256)
	readerDone := make(chan struct{})
	defer func() {
		c.close()
		<-readerDone // closing the pair unblocks its Read or its send
	}()
	go func() {
		defer close(readerDone)
		defer close(q)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				p.received.Add(int64(n))
				lat, _ := p.gate()
				select {
				case q <- chunk{b: buf[:n], due: time.Now().Add(lat)}:
				case <-c.done:
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for ch := range q {
		if wait := time.Until(ch.due); wait > 0 {
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			select {
			case <-timer.C:
			case <-c.done:
				return
			}
		}
		for {
			_, stall := p.gate()
			if stall == nil {
				break
			}
			select {
			case <-stall:
			case <-c.done:
				return
			}
		}
		// Counted before the write, so that once the other side has the
		// bytes Bytes includes them; a short write takes back the rest.
		p.bytes.Add(int64(len(ch.b)))
		n, err := dst.Write(ch.b)
		if n < len(ch.b) {
			p.bytes.Add(int64(n - len(ch.b)))
		}
		if err != nil {
			return
		}
	}
}

// pair is one proxied connection: the client's side and the server's side.
type pair struct {
	client, server net.Conn
	once           sync.Once
	done           chan struct{}
}

func (c *pair) close() {
	c.once.Do(func() {
		close(c.done)
		c.client.Close()
		c.server.Close()
	})
}

// reset closes both sides with RST rather than FIN, so peers see
// "connection reset" the way they do when a host vanishes.
func (c *pair) reset() {
	for _, n := range []net.Conn{c.client, c.server} {
		if t, ok := n.(*net.TCPConn); ok {
			t.SetLinger(0)
		}
	}
	c.close()
}
