package collector

import (
	"context"
	_ "embed"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/ctxsleep"
	"github.com/redis/go-redis/v9"
)

//go:embed passive_write.lua
var passiveWriteLua string

var passiveWriteScript = redis.NewScript(passiveWriteLua)

// Writing the passive watch's events: the watcher's sessions add events, and
// one goroutine appends them to the stream in packed entries, in order, each
// with the script above, so that only the lease's current holder writes.
const (
	// passiveMaxAge trims the stream by age (MINID ~, by event.Retention's
	// rule: on Redis's clock) as the watcher writes: a bound for a stream only the watcher
	// writes to, four times the emitters' default (15 minutes), so that it
	// does not trim what they keep unless they were told to keep more.
	passiveMaxAge   = time.Hour
	passiveBatch    = 512     // events per entry
	passiveBuffered = 100_000 // events kept while Redis does not answer; the next rescan catches up on the rest
	finalFlush      = time.Second
)

// errFenced: a watcher with a higher fence has written; this one lost the
// lease.
var errFenced = errors.New("collector: a newer watcher holds the lease")

// passiveWriter appends one term's passive events to the stream.
type passiveWriter struct {
	c        *Follower
	fence    string
	keys     []string
	resign   context.CancelFunc // ends the term when the fence is refused
	mu       sync.Mutex
	buf      []event.Event
	dropped  int
	wake     chan struct{}
	failing  string
	failedAt time.Time
	ret      *event.Retention // the stream's age rule (passiveMaxAge)
}

func newPassiveWriter(c *Follower, fence int64, resign context.CancelFunc) *passiveWriter {
	return &passiveWriter{
		c:      c,
		fence:  strconv.FormatInt(fence, 10),
		keys:   []string{watcherFenceKey(c.opt.Stream), c.opt.Stream},
		resign: resign,
		wake:   make(chan struct{}, 1),
		ret:    event.NewRetention(passiveMaxAge),
	}
}

// add queues e for the stream.
func (p *passiveWriter) add(e event.Event) {
	if len(e.Key) > event.MaxStringLen {
		return // no decoder would take it
	}
	p.mu.Lock()
	if len(p.buf) >= passiveBuffered {
		p.dropped++
	} else {
		p.buf = append(p.buf, e)
	}
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// claim raises the watcher fence to this term's: from now on no earlier
// holder of the lease writes.
func (p *passiveWriter) claim(ctx context.Context) error {
	return p.write(ctx, nil)
}

// run writes what is added until ctx ends, then what is left, briefly: the
// script refuses it if a successor has written meanwhile.
func (p *passiveWriter) run(ctx context.Context) {
	var bo backoff
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finalFlush)
			p.flush(fctx)
			cancel()
			return
		case <-p.wake:
		}
		for ctx.Err() == nil {
			err := p.flush(ctx)
			if err == nil {
				bo.reset()
				break
			}
			if errors.Is(err, errFenced) {
				p.resign()
				return
			}
			p.report(err)
			if !ctxsleep.Sleep(ctx, bo.next()) {
				break
			}
		}
	}
}

// flush writes the events queued so far; on failure they stay queued.
func (p *passiveWriter) flush(ctx context.Context) error {
	p.mu.Lock()
	evs := p.buf
	p.buf = nil
	dropped := p.dropped
	p.dropped = 0
	p.mu.Unlock()
	if dropped > 0 {
		p.c.log.Warn("passive watch: Redis did not take the watcher's events for too long; dropped the oldest (the next rescan catches up)", "dropped", dropped)
	}
	for len(evs) > 0 {
		n, size := 0, 0
		// An entry as the lock library's sink cuts one: at most
		// event.EntryBytes, by an estimate of each event's packed bytes
		// (its strings and some 64 of numbers), and passiveBatch events.
		for n < len(evs) && n < passiveBatch && size < event.EntryBytes {
			size += len(evs[n].Key) + len(evs[n].Owner) + len(evs[n].Reason) + 64
			n++
		}
		if err := p.write(ctx, evs[:n]); err != nil {
			p.mu.Lock()
			p.buf = append(evs, p.buf...)
			p.mu.Unlock()
			return err
		}
		evs = evs[n:]
	}
	return nil
}

// write appends evs as one packed entry (none: only raises the fence).
func (p *passiveWriter) write(ctx context.Context, evs []event.Event) error {
	event.SyncClock(func() (time.Time, error) { return p.c.rdb.Time(ctx).Result() }, p.ret)
	args := []any{p.fence, p.ret.MinID(time.Now())}
	if len(evs) > 0 {
		batch, ext := event.PackAll(evs)
		args = append(args, event.PackedEntry(len(evs), batch, ext)...)
	}
	res, err := passiveWriteScript.Run(ctx, p.c.rdb, p.keys, args...).Result()
	if err != nil {
		return err
	}
	switch r := res.(type) {
	case int64:
		if r < 0 {
			return errFenced
		}
	case string: // the new entry's ID
		p.ret.Written(r)
	}
	return nil
}

// report logs a failed write: again only when the error changes, or every
// 30 s.
func (p *passiveWriter) report(err error) {
	if msg := err.Error(); msg != p.failing || time.Since(p.failedAt) >= 30*time.Second {
		p.failing, p.failedAt = msg, time.Now()
		p.c.log.Warn("passive watch: cannot write the watcher's events to the stream; retrying",
			"fix", remedy(err, "the passive watch's permissions (docs/acl.md)"), "err", err)
	}
}
