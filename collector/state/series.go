package state

import (
	"time"
)

// Time is cut into steps of seriesStep by the collector's clock at the
// moment events are applied: the overview series, the per-key sparklines
// and the hot-key buckets all share these steps.
const (
	seriesStep        = 10 * time.Second
	overviewSeriesLen = 60 // 10 minutes
	keySeriesLen      = 30 // 5 minutes
	minuteSteps       = 6  // the last minute (acquire rate, contention ratio)
)

func stepOf(ns int64) int64 { return ns / int64(seriesStep) }

// keyBounds are the bucket bounds of per-key wait and hold distributions.
var keyBounds = []time.Duration{
	time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond, 50 * time.Millisecond,
	100 * time.Millisecond, 500 * time.Millisecond, time.Second, 5 * time.Second,
	10 * time.Second, 30 * time.Second, time.Minute, 5 * time.Minute,
}

// dist is a small fixed-bucket histogram over keyBounds.
type dist struct {
	counts [13]uint32
	sum    int64
	n      int64
	max    int64 // the largest observation
}

func (d *dist) add(v time.Duration) {
	i := 0
	for i < len(keyBounds) && v > keyBounds[i] {
		i++
	}
	if d.counts[i] < ^uint32(0) {
		d.counts[i]++
	}
	d.sum += int64(v)
	d.n++
	d.max = max(d.max, int64(v))
}

func (d *dist) export() Distribution {
	out := Distribution{
		Bounds: append([]time.Duration(nil), keyBounds...),
		Counts: make([]int64, len(d.counts)),
		Sum:    time.Duration(d.sum),
		Count:  d.n,
		Max:    time.Duration(d.max),
	}
	for i, c := range d.counts {
		out.Counts[i] = int64(c)
	}
	return out
}

// Quantile estimates the q-quantile (0 < q <= 1) of d as Prometheus's
// histogram_quantile does, interpolating linearly within the bucket that
// holds it, but never above the largest observation: a bucket's upper
// bound is no observation, and printed as one it overstates (one wait of
// 60.0 s read "p99 2m00s" from a bucket up to 2 minutes). Zero without
// observations.
func (d Distribution) Quantile(q float64) time.Duration {
	return quantileOf(d.Bounds, d.Counts, d.Max, q)
}

// quantileOf is Distribution.Quantile over bounds and counts (one more
// count than bounds: the observations above the last bound) with the
// largest observation hi.
func quantileOf(bounds []time.Duration, counts []int64, hi time.Duration, q float64) time.Duration {
	var total int64
	for _, c := range counts {
		total += c
	}
	if total == 0 {
		return 0
	}
	rank := min(max(q, 0), 1) * float64(total)
	var below int64
	for i, c := range counts {
		if c == 0 || float64(below+c) < rank {
			below += c
			continue
		}
		lo, up := time.Duration(0), hi
		if i > 0 {
			lo = bounds[i-1]
		}
		if i < len(bounds) {
			up = bounds[i]
		}
		v := lo + time.Duration(float64(up-lo)*(rank-float64(below))/float64(c))
		return min(max(v, lo), hi)
	}
	return hi
}

// quantileBounds are the finer bounds of the overview's p99 figures.
var quantileBounds = []time.Duration{
	100 * time.Microsecond, 200 * time.Microsecond, 500 * time.Microsecond,
	time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond,
	10 * time.Millisecond, 20 * time.Millisecond, 50 * time.Millisecond,
	100 * time.Millisecond, 200 * time.Millisecond, 500 * time.Millisecond,
	time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 20 * time.Second,
	30 * time.Second, time.Minute, 2 * time.Minute, 5 * time.Minute,
}

// qhist is a histogram over quantileBounds, with its largest observation.
type qhist struct {
	n   [22]int64
	max int64
}

func (h *qhist) add(v time.Duration) {
	i := 0
	for i < len(quantileBounds) && v > quantileBounds[i] {
		i++
	}
	h.n[i]++
	h.max = max(h.max, int64(v))
}

func (h *qhist) merge(o *qhist) {
	for i := range h.n {
		h.n[i] += o.n[i]
	}
	h.max = max(h.max, o.max)
}

// quantile estimates the q-quantile (see Distribution.Quantile).
func (h *qhist) quantile(q float64) time.Duration {
	return quantileOf(quantileBounds, h.n[:], time.Duration(h.max), q)
}

// stepStats are the overview figures of one step.
type stepStats struct {
	step                      int64 // which step these figures belong to
	acquisitions, contentions int64
	passive                   int64 // acquisitions seen by the passive watch: their wait is unknown
	refused, failures         int64
	expirations, forced       int64
	expiredWorking            int64 // expirations found to be under a working holder during this step
	overlaps                  int64 // overlaps found during this step (overlap.go)
	wait, hold                qhist
}

// stepRing keeps the overview figures of the last overviewSeriesLen steps.
type stepRing struct{ s [overviewSeriesLen]stepStats }

// at returns the figures of step, resetting a slot left from an older lap.
func (r *stepRing) at(step int64) *stepStats {
	s := &r.s[step%overviewSeriesLen]
	if s.step != step {
		*s = stepStats{step: step}
	}
	return s
}

// get returns the figures of step, or nil if none were recorded.
func (r *stepRing) get(step int64) *stepStats {
	s := &r.s[step%overviewSeriesLen]
	if s.step != step {
		return nil
	}
	return s
}

// addAcquisition counts one acquisition at now in a key's sparkline.
func (s *keyStats) addAcquisition(now int64) {
	cur := stepOf(now)
	if cur > s.acqAt {
		if cur-s.acqAt >= keySeriesLen {
			s.acq = [keySeriesLen]uint32{}
		} else {
			for i := s.acqAt + 1; i <= cur; i++ {
				s.acq[i%keySeriesLen] = 0
			}
		}
		s.acqAt = cur
	}
	i := cur % keySeriesLen
	if cur < s.acqAt-keySeriesLen+1 {
		return // older than the ring (clock went back)
	}
	if s.acq[i] < ^uint32(0) {
		s.acq[i]++
	}
}

// series returns acquisitions per second per step, oldest first, ending at
// the step of now.
func (s *keyStats) series(now int64) []float64 {
	cur := stepOf(now)
	out := make([]float64, keySeriesLen)
	for j := 0; j < keySeriesLen; j++ {
		step := cur - keySeriesLen + 1 + int64(j)
		if step > s.acqAt || step <= s.acqAt-keySeriesLen {
			continue
		}
		out[j] = float64(s.acq[step%keySeriesLen]) / seriesStep.Seconds()
	}
	return out
}
