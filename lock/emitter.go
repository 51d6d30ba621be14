package lock

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/event"
)

// EmitterOptions configures an Emitter. The zero value (or a nil pointer)
// writes packed batches to event.DefaultStream on the emitter's Redis client.
type EmitterOptions struct {
	// Stream is the stream key; "" means event.DefaultStream. Ignored when
	// Sink is set.
	Stream string
	// Partitions spreads events by lock key over this many streams,
	// event.Streams(Stream, Partitions), so that a Redis Cluster spreads
	// them over its masters; a key's events stay in order in its partition.
	// 0 or 1 means the one stream Stream. Collectors must read the same
	// number of partitions. Ignored when Sink is set.
	Partitions int
	// MaxAge trims the stream to the entries at most this much older than
	// the newest (XADD MINID ~, on the stream's own clock: the times in the
	// IDs Redis gives entries); 0 means 15 minutes. What it keeps is what a
	// collector that stopped can still read when it comes back, and what
	// Redis's memory holds: some 100 bytes per event (30-byte keys), so
	// 1 000 events/s keep about 90 MB. Ignored when MaxLen is set or Sink
	// is set.
	MaxAge time.Duration
	// MaxLen, if positive, trims the stream to about MaxLen entries instead
	// (XADD MAXLEN ~; an entry holds a whole batch, up to BatchSize events,
	// and each emitter writes at least one every FlushInterval it records
	// anything, so what MaxLen keeps depends on the rate and on how many
	// processes write). Negative means never trim. Ignored when Sink is set.
	MaxLen int64
	// BatchSize flushes as soon as this many events are buffered, and is the
	// most events one write carries; 0 means 2048. Capped at BufferSize and
	// at event.MaxBatchEvents-1 (room for a dropped report). Larger entries
	// cost Redis less per event (a fixed cost per XADD); an XADD holds Redis
	// longer (about 0.6 ms for 2048 events on a stream still growing, on a
	// small VM). The default StreamSink writes a batch over 256 KiB of
	// encoding as several entries.
	BatchSize int
	// FlushInterval is the longest an event waits in the buffer; 0 means,
	// and more than 100 ms is capped at, 100 ms.
	FlushInterval time.Duration
	// BufferSize bounds the events held in memory, buffered or being
	// written; when full, Record drops the event and counts it. 0 means
	// 16384.
	BufferSize int
	// Sink receives the batches; nil means a StreamSink on the client.
	Sink Sink
	// WriteTimeout bounds each batch write; 0 means 1 s.
	WriteTimeout time.Duration
	// Owner is the identity put in the emitter's own event.Dropped reports;
	// "" leaves their owner empty.
	Owner string
	// Logger receives write failures and recoveries (once per outage, not
	// once per batch); nil discards them.
	Logger *slog.Logger
}

// EmitterStats are an Emitter's counters since it was created. Once the
// emitter is closed, Recorded == Sent + Dropped.
type EmitterStats struct {
	Recorded uint64 // Record calls, including the events then dropped
	Sent     uint64 // recorded events a sink write accepted
	Dropped  uint64 // recorded events lost: buffer full, write failed, too large, or after Close
	Batches  uint64 // successful sink writes
	Errors   uint64 // failed sink writes
}

// Emitter is a Recorder that batches events in memory and writes them from
// one background goroutine: by default one packed XADD per batch. Record
// never blocks and, once the buffers have grown to the load, does not
// allocate: when the buffer is full or the sink fails, events are dropped,
// counted in Stats, and the count is reported by an event.Dropped event in
// a later successful batch.
//
// Close the emitter to flush the last events and stop its goroutine.
type Emitter struct {
	sink          Sink
	owner         string
	batchSize     int
	bufferSize    int
	flushInterval time.Duration
	writeTimeout  time.Duration
	log           *slog.Logger

	// mu guards what Record touches; the writer holds it only to swap
	// buffers and to account for what it wrote.
	mu       sync.Mutex
	buf      []event.Event // filled by Record
	inflight int           // events taken by the writer and not yet written
	closed   bool
	recorded uint64

	dropped    atomic.Uint64
	unreported atomic.Int64 // dropped events not yet reported by an event.Dropped
	sent       atomic.Uint64
	batches    atomic.Uint64
	errors     atomic.Uint64

	wake   chan struct{}        // cap 1: first event buffered, or a batch is full
	flushc chan flushRequest    // Flush
	stop   chan context.Context // cap 1: Close, carrying its context
	done   chan struct{}        // closed when the goroutine has returned

	closeErr error // written by the goroutine before done is closed

	// Owned by the goroutine.
	spare   []event.Event // the other half of the double buffer
	scratch []event.Event // a chunk with a dropped report in front
	failing bool          // the last write failed
}

type flushRequest struct {
	ctx  context.Context
	done chan error
}

var _ Recorder = (*Emitter)(nil)

const (
	// defaultMaxAge: three times the collector's default backfill (5 min),
	// so a collector restarted, rescheduled or upgraded reads what it
	// missed; the stream trims, which bounds Redis's memory and keeps
	// Redis in its cheaper regime per event (docs/events.md, issue 28).
	// Before, 1 000 000 entries: with 2048-event entries some 150 GB.
	defaultMaxAge       = 15 * time.Minute
	maxFlushInterval    = 100 * time.Millisecond
	defaultBufferSize   = 16384
	defaultWriteTimeout = time.Second
	initialBuffer       = 1024 // events each buffer has room for at first: they grow to the load
)

// defaultBatchSize is EmitterOptions.BatchSize's default. Redis's time per
// event falls with the entry's size: each XADD has a fixed cost, some
// 170 µs on a stream still growing and 17 µs on a trimmed one on a 2-vCPU
// VM. From 512 events (37 kB) to 2048 (149 kB), Redis's CPU per event went
// from 600 to 350 ns on a growing stream and from 90 to 43 ns on a trimmed
// one, and the lock benchmark's XADD time per cycle fell by a third
// (BenchmarkStreamSinkEntrySize, BENCHMARKS.md, issue 28). Beyond 2048 the
// gain is small and each XADD holds Redis longer. The collector applies
// decoded events 4096 at a time and sizes its reads by bytes, so it reads
// such entries as it reads smaller ones.
const defaultBatchSize = 2048

// NewEmitter starts an emitter writing to rdb (rdb may be nil when opt.Sink
// is set). opt may be nil. Close it to stop its goroutine.
func NewEmitter(rdb redis.UniversalClient, opt *EmitterOptions) *Emitter {
	var o EmitterOptions
	if opt != nil {
		o = *opt
	}
	if o.Sink == nil {
		if rdb == nil {
			panic("lock: NewEmitter needs a Redis client or EmitterOptions.Sink")
		}
		var trim StreamTrim
		switch {
		case o.MaxLen > 0:
			trim.MaxLen = o.MaxLen
		case o.MaxLen == 0 && o.MaxAge > 0:
			trim.MaxAge = o.MaxAge
		case o.MaxLen == 0:
			trim.MaxAge = defaultMaxAge
		}
		if o.Partitions > 1 {
			o.Sink = NewPartitionedStreamSinkTrim(rdb, o.Stream, o.Partitions, trim)
		} else {
			o.Sink = NewStreamSinkTrim(rdb, o.Stream, trim)
		}
	}
	if o.BufferSize <= 0 {
		o.BufferSize = defaultBufferSize
	}
	if o.BatchSize <= 0 {
		o.BatchSize = defaultBatchSize
	}
	o.BatchSize = min(o.BatchSize, o.BufferSize, event.MaxBatchEvents-1)
	if o.FlushInterval <= 0 || o.FlushInterval > maxFlushInterval {
		o.FlushInterval = maxFlushInterval
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = defaultWriteTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	initial := min(o.BufferSize, 2*o.BatchSize, initialBuffer)
	e := &Emitter{
		sink:          o.Sink,
		owner:         o.Owner,
		batchSize:     o.BatchSize,
		bufferSize:    o.BufferSize,
		flushInterval: o.FlushInterval,
		writeTimeout:  o.WriteTimeout,
		log:           o.Logger,
		buf:           make([]event.Event, 0, initial),
		spare:         make([]event.Event, 0, initial),
		wake:          make(chan struct{}, 1),
		flushc:        make(chan flushRequest),
		stop:          make(chan context.Context, 1),
		done:          make(chan struct{}),
	}
	go e.run()
	return e
}

// Record buffers ev for the next batch. It never blocks: if the buffer is
// full, the emitter is closed, or a string field is longer than
// event.MaxStringLen (the collector would reject the whole batch), the event
// is dropped and counted.
func (e *Emitter) Record(ev event.Event) {
	tooLarge := len(ev.Key) > event.MaxStringLen || len(ev.Owner) > event.MaxStringLen ||
		len(ev.Lease) > event.MaxStringLen || len(ev.Reason) > event.MaxStringLen ||
		len(ev.Holder) > event.MaxStringLen || len(ev.By) > event.MaxStringLen
	e.mu.Lock()
	e.recorded++
	if tooLarge || e.closed || len(e.buf)+e.inflight >= e.bufferSize {
		e.mu.Unlock()
		e.drop(1)
		return
	}
	e.buf = append(e.buf, ev)
	n := len(e.buf)
	e.mu.Unlock()
	// Wake the writer to start the interval clock, or because a batch is
	// full. A wake-up already pending serves as well: the writer looks at
	// the buffer after receiving it.
	if n == 1 || n == e.batchSize {
		select {
		case e.wake <- struct{}{}:
		default:
		}
	}
}

func (e *Emitter) drop(n int) {
	e.dropped.Add(uint64(n))
	e.unreported.Add(int64(n))
}

// Flush writes every event recorded before the call and waits for the
// write. It returns the sink's error (those events are then dropped and
// counted) or ctx's error if ctx ends first. After Close it returns nil:
// Close has flushed everything.
func (e *Emitter) Flush(ctx context.Context) error {
	req := flushRequest{ctx: ctx, done: make(chan error, 1)}
	select {
	case e.flushc <- req:
	case <-e.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-req.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close flushes what is buffered, stops the goroutine and waits for it,
// at most until ctx ends (then the goroutine abandons the write under ctx
// and returns soon after). Events recorded after Close are dropped and
// counted. Close is idempotent; every call returns the final flush's error.
func (e *Emitter) Close(ctx context.Context) error {
	e.mu.Lock()
	first := !e.closed
	e.closed = true
	e.mu.Unlock()
	if first {
		e.stop <- ctx
	}
	select {
	case <-e.done:
		return e.closeErr
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Stats returns the emitter's counters.
func (e *Emitter) Stats() EmitterStats {
	e.mu.Lock()
	recorded := e.recorded
	e.mu.Unlock()
	return EmitterStats{
		Recorded: recorded,
		Sent:     e.sent.Load(),
		Dropped:  e.dropped.Load(),
		Batches:  e.batches.Load(),
		Errors:   e.errors.Load(),
	}
}

// run is the emitter's goroutine: it writes when a batch is full, when the
// oldest buffered event has waited flushInterval, on Flush and on Close.
func (e *Emitter) run() {
	defer close(e.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	armed := false
	// retryAt holds back size-triggered writes after a failure, so a dead
	// Redis is tried once per interval, not once per batch.
	var retryAt time.Time
	arm := func() {
		if !armed {
			timer.Reset(e.flushInterval)
			armed = true
		}
	}
	flush := func(ctx context.Context) error {
		err := e.flush(ctx)
		timer.Stop()
		armed = false
		if err != nil {
			retryAt = time.Now().Add(e.flushInterval)
		}
		if e.pending() {
			arm()
		}
		return err
	}
	for {
		select {
		case <-e.wake:
			n := e.buffered()
			switch {
			case n >= e.batchSize && !time.Now().Before(retryAt):
				flush(context.Background())
			case n > 0:
				arm()
			}
		case <-timer.C:
			armed = false
			flush(context.Background())
		case req := <-e.flushc:
			req.done <- flush(req.ctx)
		case ctx := <-e.stop:
			e.closeErr = flush(ctx)
			return
		}
	}
}

func (e *Emitter) buffered() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.buf)
}

// pending reports whether there is anything to write: events or a report.
func (e *Emitter) pending() bool {
	return e.buffered() > 0 || e.unreported.Load() > 0
}

// flush writes the buffered events in chunks of at most batchSize, the
// first one led by an event.Dropped report if events were dropped since the
// last successful one. After a failed chunk the rest of the buffer is
// dropped without trying: the sink is failing, and memory stays bounded.
func (e *Emitter) flush(ctx context.Context) error {
	e.mu.Lock()
	batch := e.buf
	e.buf = e.spare
	e.inflight = len(batch)
	e.mu.Unlock()
	e.spare = nil

	report := e.unreported.Load()
	var err error
	for rest := batch; len(rest) > 0 || report > 0; {
		chunk := rest[:min(len(rest), e.batchSize)]
		if report > 0 {
			chunk = rest[:min(len(rest), e.batchSize-1)]
			e.scratch = append(e.scratch[:0], event.Event{
				Type:  event.Dropped,
				Owner: e.owner,
				TS:    time.Now().UnixNano(),
				Count: report,
			})
			e.scratch = append(e.scratch, chunk...)
		}
		rest = rest[len(chunk):]
		if err == nil {
			w := chunk
			if report > 0 {
				w = e.scratch
			}
			err = e.write(ctx, w, len(chunk))
			if err == nil && report > 0 {
				e.unreported.Add(-report)
			}
			clear(e.scratch)
		}
		if err != nil {
			e.drop(len(chunk))
		}
		report = 0
		e.mu.Lock()
		e.inflight -= len(chunk)
		e.mu.Unlock()
	}
	// Drop the references so written events' strings can be collected.
	clear(batch)
	e.spare = batch[:0]
	return err
}

// write hands one chunk to the sink; n is the number of recorded events in
// it (a dropped report is not one of them).
func (e *Emitter) write(ctx context.Context, events []event.Event, n int) error {
	wctx, cancel := context.WithTimeout(ctx, e.writeTimeout)
	err := e.sink.Write(wctx, events)
	cancel()
	if err != nil {
		e.errors.Add(1)
		if !e.failing {
			e.failing = true
			e.log.Warn("lockscope emitter: write failed; dropping events until the sink recovers",
				"events", len(events), "err", err)
		}
		return err
	}
	e.batches.Add(1)
	e.sent.Add(uint64(n))
	if e.failing {
		e.failing = false
		e.log.Info("lockscope emitter: writes recovered", "dropped_total", e.dropped.Load())
	}
	return nil
}
