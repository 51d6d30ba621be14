package collector

import (
	"context"
	"sync"
	"time"
)

// sharedRead is one read of something in Redis that many readers want
// (riverui's query cacher): the latest result is kept and handed to every
// reader for fresh; when it is older, the first reader starts one read and
// every reader meanwhile waits for that same read. So a crowd of readers
// costs one read per fresh, whatever its size, and holds one result in
// memory, not one each. The result is shared: readers must not modify it.
//
// The read runs with its own deadline (timeout), not a reader's context: a
// reader that gives up does not fail the others' read.
type sharedRead[T any] struct {
	read    func(ctx context.Context) (T, error)
	fresh   time.Duration
	timeout time.Duration
	now     func() time.Time

	mu   sync.Mutex
	val  T
	at   time.Time     // when val was read; zero: never, or invalidated
	busy chan struct{} // closed when the read under way ends; nil: none
	err  error         // the last read's error, for its waiters
	gen  uint64        // counts invalidations: a read begun before one is not fresh after it
}

func newSharedRead[T any](read func(ctx context.Context) (T, error), fresh, timeout time.Duration, now func() time.Time) *sharedRead[T] {
	return &sharedRead[T]{read: read, fresh: fresh, timeout: timeout, now: now}
}

// get returns the latest result if it is fresh, else that of the read
// under way or of a new one.
func (s *sharedRead[T]) get(ctx context.Context) (T, error) {
	s.mu.Lock()
	if !s.at.IsZero() && s.now().Sub(s.at) < s.fresh {
		v := s.val
		s.mu.Unlock()
		return v, nil
	}
	busy := s.busy
	if busy == nil {
		busy = make(chan struct{})
		s.busy = busy
		go s.run(busy, s.gen)
	}
	s.mu.Unlock()
	select {
	case <-busy:
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		var zero T
		return zero, s.err
	}
	return s.val, nil
}

func (s *sharedRead[T]) run(busy chan struct{}, gen uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	v, err := s.read(ctx)
	cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.err = err
	if err == nil {
		s.val, s.at = v, s.now()
		if gen != s.gen {
			s.at = time.Time{}
		}
	}
	s.busy = nil
	close(busy)
}

// invalidate makes the next get read again: after a write of its own, a
// replica lists what it wrote.
func (s *sharedRead[T]) invalidate() {
	s.mu.Lock()
	s.at = time.Time{}
	s.gen++
	s.mu.Unlock()
}
