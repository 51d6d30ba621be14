package lock

import (
	"math/rand/v2"
	"time"
)

// RetryStrategy decides how long Obtain waits before its next attempt.
// Backoff is called after the n-th failed attempt (n starts at 1) and returns
// the wait and whether to try again at all. It must be safe for concurrent
// use: one strategy may serve many Obtain calls. Obtain never waits past its
// context's deadline, whatever the strategy says.
type RetryStrategy interface {
	Backoff(n int) (wait time.Duration, again bool)
}

// RetryFunc adapts a function to RetryStrategy.
type RetryFunc func(n int) (time.Duration, bool)

// Backoff calls f.
func (f RetryFunc) Backoff(n int) (time.Duration, bool) { return f(n) }

type noRetry struct{}

func (noRetry) Backoff(int) (time.Duration, bool) { return 0, false }

// NoRetry makes a single attempt (the default).
func NoRetry() RetryStrategy { return noRetry{} }

type linear time.Duration

func (d linear) Backoff(int) (time.Duration, bool) { return time.Duration(d), true }

// LinearBackoff retries every d until the context ends.
func LinearBackoff(d time.Duration) RetryStrategy { return linear(d) }

type exponential struct{ min, max time.Duration }

// ExponentialBackoff retries after waits that double from min up to max,
// each drawn at random from its upper half ("equal jitter"), so that waiters
// released together do not retry in lockstep.
func ExponentialBackoff(min, max time.Duration) RetryStrategy {
	if min <= 0 {
		min = time.Millisecond
	}
	if max < min {
		max = min
	}
	return exponential{min, max}
}

func (e exponential) Backoff(n int) (time.Duration, bool) {
	d := e.max
	if n < 1 {
		n = 1
	}
	if n < 63 {
		if s := e.min << (n - 1); s > 0 && s < e.max && s>>(n-1) == e.min {
			d = s
		}
	}
	half := d / 2
	return half + rand.N(d-half+1), true
}

type limit struct {
	s RetryStrategy
	n int
}

// LimitRetry retries at most n times (n+1 attempts in all) with the waits of
// s.
func LimitRetry(s RetryStrategy, n int) RetryStrategy { return limit{s, n} }

func (l limit) Backoff(n int) (time.Duration, bool) {
	if n > l.n {
		return 0, false
	}
	return l.s.Backoff(n)
}
