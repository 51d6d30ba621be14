package redistest

import (
	"context"
	"testing"
	"time"
)

// Cond is what WaitFor polls: a func() bool, or a func() error that returns
// nil once the wait is over and otherwise says what is still missing (the
// last such error ends up in the failure message).
type Cond interface {
	func() bool | func() error
}

// WaitFor polls cond until it holds; if within passes first it fails tb,
// naming what it waited for (and, for a func() error, the last error).
// Polls start a few milliseconds apart and back off to 50 ms, so a quick
// condition is seen quickly and a slow one (an HTTP scrape of a process
// under test) does not steal the cores the process needs.
func WaitFor[C Cond](tb testing.TB, within time.Duration, what string, cond C) {
	tb.Helper()
	check := func() error {
		switch c := any(cond).(type) {
		case func() bool:
			if c() {
				return nil
			}
			return errNotYet
		case func() error:
			return c()
		}
		panic("unreachable")
	}
	deadline := time.Now().Add(within)
	for pause := 5 * time.Millisecond; ; pause = min(2*pause, 50*time.Millisecond) {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			if err == errNotYet {
				tb.Fatalf("waited %v for %s", within, what)
			}
			tb.Fatalf("waited %v for %s: %v", within, what, err)
		}
		time.Sleep(pause)
	}
}

var errNotYet = notYet{}

type notYet struct{}

func (notYet) Error() string { return "not yet" }

// Poll polls cond, backing off as WaitFor does, until it holds or ctx ends,
// and reports whether it held. It is for waits whose failure the caller
// reports itself, with the state it found, or that are no failure at all.
func Poll(ctx context.Context, cond func() bool) bool {
	for pause := 5 * time.Millisecond; ; pause = min(2*pause, 50*time.Millisecond) {
		if cond() {
			return true
		}
		if !Sleep(ctx, pause) {
			return cond()
		}
	}
}

// Sleep waits for d or until ctx ends, and reports whether d passed.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Context returns a context that ends with tb, or 10 s before the test
// binary's deadline (go test -timeout), whichever comes first. It bounds a
// long run of work (a browser walking every page, a tool's run) by nothing
// a loaded host could reach, and still ends a hung test with its own
// message instead of the binary's panic.
func Context(tb testing.TB) context.Context {
	ctx := tb.Context()
	if t, ok := tb.(interface{ Deadline() (time.Time, bool) }); ok {
		if dl, ok := t.Deadline(); ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, dl.Add(-10*time.Second))
			tb.Cleanup(cancel)
		}
	}
	return ctx
}
