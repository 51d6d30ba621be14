package dashboard

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/keytext"
)

// Geometry for the inline SVG pictures. Pages get ready-made coordinates as
// strings so the templ components stay plain markup; the CSP forbids inline
// style attributes, so every size is an SVG attribute and every colour a CSS
// class.

// spark is a sparkline: a polyline over an area in a w×h box.
type spark struct {
	W, H  int
	Line  string // polyline points
	Area  string // closed path under the line
	Last  string // the newest value, formatted
	Max   string // the highest value, formatted
	Title string // accessible description
}

func newSpark(values []float64, w, h int, format func(float64) string, title string) *spark {
	if len(values) < 2 {
		return nil
	}
	maxV := slices.Max(values)
	sp := &spark{W: w, H: h, Title: title, Last: format(values[len(values)-1]), Max: format(maxV)}
	if maxV <= 0 {
		maxV = 1
	}
	const pad = 1.5
	stepX := float64(w) / float64(len(values)-1)
	var line, area strings.Builder
	area.WriteString("M0," + f1(float64(h)))
	for i, v := range values {
		x := float64(i) * stepX
		y := float64(h) - pad - (float64(h)-2*pad)*math.Max(v, 0)/maxV
		if i > 0 {
			line.WriteByte(' ')
		}
		line.WriteString(f1(x) + "," + f1(y))
		area.WriteString(" L" + f1(x) + "," + f1(y))
	}
	area.WriteString(" L" + f1(float64(w)) + "," + f1(float64(h)) + " Z")
	sp.Line, sp.Area = line.String(), area.String()
	return sp
}

// trimSeries prepares a rate series for a sparkline. The newest point is
// the step still in progress, whose rate reads low until the step ends, so
// it is left out. Leading zeros before the first activity (a collector that
// just started) are cut, keeping at least minPoints, so the line shows
// activity rather than a flat start.
func trimSeries(values []float64, minPoints int) []float64 {
	if len(values) < 3 {
		return nil
	}
	values = values[:len(values)-1]
	first := len(values)
	for i, v := range values {
		if v != 0 {
			first = i
			break
		}
	}
	if first == len(values) {
		return values[max(0, len(values)-minPoints):] // all quiet: a flat line
	}
	return values[min(first, max(0, len(values)-minPoints)):]
}

// meter is a horizontal share bar (0..100 in a 100-wide viewBox).
func meter(v, maxV float64) string {
	if maxV <= 0 || v <= 0 {
		return "0"
	}
	return f1(math.Max(1, 100*math.Min(v/maxV, 1)))
}

// distView is a histogram as columns, one per bucket.
type distView struct {
	Title    string
	W, H     int
	Bars     []distBar
	Count    string
	Mean     string
	P50, P99 string
	Max      string // the largest observation; "" if unknown
	Empty    bool
	EmptyMsg string // what an empty card says; "" means "No observations yet."
	// Axes: bars start at PlotX (left of it, the count scale); XTitle names
	// what the buckets measure and its unit, YTitle what the bars count.
	PlotX, BaseY   int
	YTicks         []distTick
	XTitle, YTitle string
	XTitleY        int
}

// distTick is one mark of the count scale.
type distTick struct {
	Y      string
	LabelY string // Y, kept inside the chart for the top mark
	Label  string
}

type distBar struct {
	X, Y, W, H string
	Label      string // bucket upper bound, shown under some bars
	LabelX     string
	Tip        string
	Hot        bool // holds the p99
}

const (
	distW, distH  = 560, 120
	distLabelRoom = 34 // bucket labels, then the x axis title
	distYAxisW    = 52 // the count scale and its title
)

// newDist draws d. what names the measured time ("wait", "hold"): the x
// axis reads "<what> time, bucket upper bound" and the y axis "calls".
func newDist(title, what string, d state.Distribution) distView {
	v := distView{Title: title, W: distW, H: distH + distLabelRoom, Count: fmtCount(d.Count),
		PlotX: distYAxisW, BaseY: distH, XTitle: what + " time (bucket upper bound)", YTitle: "calls", XTitleY: distH + distLabelRoom - 3}
	if d.Count == 0 || len(d.Counts) == 0 {
		v.Empty = true
		return v
	}
	v.Mean = fmtDuration(d.Sum / time.Duration(d.Count))
	v.P50 = quantileLabel(d, 0.50)
	v.P99 = quantileLabel(d, 0.99)
	if d.Max > 0 {
		v.Max = fmtDuration(d.Max)
	}
	p99 := quantileBucket(d, 0.99)
	// Only the populated span of buckets is drawn, so a lock whose waits are
	// all under 10 ms is not a thin line at the left of a 5-minute axis.
	lo, hi := 0, len(d.Counts)-1
	for lo < hi && d.Counts[lo] == 0 {
		lo++
	}
	for hi > lo && d.Counts[hi] == 0 {
		hi--
	}
	lo, hi = max(0, lo-1), min(len(d.Counts)-1, hi+1)
	n := hi - lo + 1
	maxC := int64(1)
	for _, c := range d.Counts[lo : hi+1] {
		maxC = max(maxC, c)
	}
	// The count scale: 0, half and the tallest bar's count.
	ticks := []int64{0, maxC}
	if half := maxC / 2; half > 0 {
		ticks = []int64{0, half, maxC}
	}
	for _, c := range ticks {
		y := float64(distH) - float64(distH-4)*float64(c)/float64(maxC)
		v.YTicks = append(v.YTicks, distTick{Y: f1(y), LabelY: f1(max(y, 7)), Label: fmtCount(c)})
	}
	plotW := float64(distW - distYAxisW)
	slot := plotW / float64(n)
	gap := math.Min(4, slot*0.2)
	labelEvery := int(math.Ceil(float64(n) * 56 / plotW))
	for i := lo; i <= hi; i++ {
		c := d.Counts[i]
		h := 0.0
		if c > 0 {
			h = math.Max(2, float64(distH-4)*float64(c)/float64(maxC))
		}
		x := float64(distYAxisW) + float64(i-lo)*slot
		b := distBar{
			X: f1(x + gap/2), W: f1(slot - gap), Y: f1(float64(distH) - h), H: f1(h),
			Tip: bucketName(d.Bounds, i) + ": " + fmtCount(c),
			Hot: i == p99,
		}
		if (i-lo)%labelEvery == 0 {
			b.Label = bucketShort(d.Bounds, i)
			b.LabelX = f1(x + slot/2)
		}
		v.Bars = append(v.Bars, b)
	}
	return v
}

func bucketName(bounds []time.Duration, i int) string {
	switch {
	case i < len(bounds) && i == 0:
		return "≤ " + fmtBound(bounds[0])
	case i < len(bounds):
		return fmtBound(bounds[i-1]) + " – " + fmtBound(bounds[i])
	case len(bounds) > 0:
		return "> " + fmtBound(bounds[len(bounds)-1])
	default:
		return "all"
	}
}

func bucketShort(bounds []time.Duration, i int) string {
	if i < len(bounds) {
		return fmtBound(bounds[i])
	}
	if len(bounds) > 0 {
		return ">" + fmtBound(bounds[len(bounds)-1])
	}
	return ""
}

// quantileBucket is the bucket holding the q-quantile.
func quantileBucket(d state.Distribution, q float64) int {
	target := int64(math.Ceil(q * float64(d.Count)))
	var cum int64
	for i, c := range d.Counts {
		cum += c
		if cum >= target && c > 0 {
			return i
		}
	}
	return len(d.Counts) - 1
}

// quantileLabel is the q-quantile interpolated within its bucket, never
// above the largest observation (state.Distribution.Quantile): a bucket's
// upper bound printed as the figure read "p50 ≤ 5m00s" for waits of a
// minute. Without a known largest observation it is that bound, "≤".
func quantileLabel(d state.Distribution, q float64) string {
	if d.Max > 0 {
		return "≈ " + fmtDuration(d.Quantile(q))
	}
	i := quantileBucket(d, q)
	if i < len(d.Bounds) {
		return "≤ " + fmtDuration(d.Bounds[i])
	}
	if len(d.Bounds) > 0 {
		return "> " + fmtDuration(d.Bounds[len(d.Bounds)-1])
	}
	return "—"
}

// timelineView draws recent events: one lane per owner, hold spans from
// acquisition to its end, and a mark for every event.
type timelineView struct {
	W, H  int
	Lanes []tlLane
	Spans []tlSpan
	Marks []tlMark
	Ticks []tlTick
	Empty bool
	From  string // how far back the axis reaches
	// Overlaps shade the windows in which two holders held the key at
	// once, across both holders' lanes, with their length.
	Overlaps []tlShade
}

// tlShade is one overlap on the timeline.
type tlShade struct {
	X, Y, W, H     string
	LabelX, LabelY string
	Label          string // "overlap 3.01s"
	Tip            string
}

type tlLane struct {
	Y, TextY string
	Label    string
	Full     string
}

type tlSpan struct {
	X, Y, W, H string
	Open       bool // still held at the right edge
	Tip        string
}

type tlMark struct {
	X, Y  string
	Type  string // event type: CSS class
	Tip   string
	Glyph string // path data, centred on 0,0
}

type tlTick struct{ X, Label string }

const (
	tlW, tlLabelW     = 1120, 170
	tlLaneH, tlAxisH  = 26, 22
	tlMaxLanes        = 8
	tlMarkR           = 4.5
	tlMinSpanW        = 2.0
	tlLastLaneOther   = "other owners"
	tlEventsOnTopLane = "waiters"
)

// tlHolder is the current holder, drawn even when its acquisition has
// left the ring of recent events.
type tlHolder struct {
	Owner, Lease string
	Since        time.Time
}

func newTimeline(events []event.Event, now time.Time, holder *tlHolder, overlaps []state.Incident) timelineView {
	v := timelineView{W: tlW}
	if len(events) == 0 {
		v.Empty = true
		v.H = tlLaneH + tlAxisH
		return v
	}
	// events are newest first; walk oldest first.
	evs := slices.Clone(events)
	slices.Reverse(evs)
	start := evs[0].TS
	end := now.UnixNano()
	if last := evs[len(evs)-1].TS; last > end {
		end = last
	}
	if end-start < int64(time.Second) {
		start = end - int64(time.Second)
	}
	span := float64(end - start)
	plotW := float64(tlW - tlLabelW - 12)
	xOf := func(ts int64) float64 { return float64(tlLabelW) + plotW*float64(ts-start)/span }

	// Lanes: the first lane collects what happens to callers who do not
	// hold (failures); then one lane per owner in order of first appearance.
	lanes := map[string]int{}
	laneOf := func(owner string) int {
		if i, ok := lanes[owner]; ok {
			return i
		}
		if len(v.Lanes) >= tlMaxLanes {
			if i, ok := lanes[tlLastLaneOther]; ok {
				return i
			}
			owner = tlLastLaneOther
		}
		i := len(v.Lanes)
		lanes[owner] = i
		disp, _ := keytext.Visible(owner)
		v.Lanes = append(v.Lanes, tlLane{Label: elideMiddle(disp, 24), Full: disp})
		return i
	}
	laneOf(tlEventsOnTopLane)
	v.Lanes[0].Label, v.Lanes[0].Full = "failed tries", "acquisitions that gave up"

	type open struct {
		ts    int64
		lane  int
		owner string
	}
	holds := map[string]open{} // by lease
	closeSpan := func(o open, endTS int64, how string, isOpen bool) {
		x0, x1 := xOf(o.ts), xOf(endTS)
		v.Spans = append(v.Spans, tlSpan{
			X: f1(x0), W: f1(math.Max(tlMinSpanW, x1-x0)), Y: strconv.Itoa(o.lane*tlLaneH + 6), H: strconv.Itoa(tlLaneH - 12),
			Open: isOpen, Tip: o.owner + " held " + fmtDuration(time.Duration(endTS-o.ts)) + how,
		})
	}
	for _, e := range evs {
		lane := 0
		if e.Type != event.Failed {
			lane = laneOf(e.Owner)
		}
		owner, _ := keytext.Visible(e.Owner)
		switch e.Type {
		case event.Acquired:
			holds[e.Lease] = open{ts: e.TS, lane: lane, owner: owner}
		case event.Released, event.Lost, event.Expired, event.Forced:
			if o, ok := holds[e.Lease]; ok {
				closeSpan(o, e.TS, " ("+e.Type.String()+")", false)
				delete(holds, e.Lease)
			} else if e.Hold > 0 {
				// The acquisition fell out of the recent window: draw the
				// part of the hold that is on the axis.
				from := max(start, e.TS-int64(e.Hold))
				closeSpan(open{ts: from, lane: lane, owner: owner}, e.TS, " ("+e.Type.String()+")", false)
			}
		}
		tip := fmtClock(e.Time()) + " " + e.Type.String() + " · " + owner
		switch {
		case e.Type == event.Requested:
			tip += requestedTip(e)
		case e.Wait > 0:
			tip += " · waited " + fmtDuration(e.Wait)
		case e.Hold > 0:
			tip += " · held " + fmtDuration(e.Hold)
		}
		if e.Reason != "" {
			tip += " · " + e.Reason
		}
		if e.By != "" {
			by, _ := keytext.Visible(e.By)
			tip += " · by " + by
		}
		v.Marks = append(v.Marks, tlMark{
			X: f1(xOf(e.TS)), Y: f1(float64(lane*tlLaneH) + tlLaneH/2),
			Type: e.Type.String(), Tip: tip, Glyph: glyph(e.Type),
		})
	}
	if holder != nil {
		if _, ok := holds[holder.Lease]; !ok {
			owner, _ := keytext.Visible(holder.Owner)
			holds[holder.Lease] = open{ts: max(start, holder.Since.UnixNano()), lane: laneOf(holder.Owner), owner: owner}
		}
	}
	for _, o := range holds {
		closeSpan(o, end, " (still held)", true)
	}
	// Each overlap: the first holder worked on, in its lane, while the
	// second held the key; the window both held it is shaded across
	// their lanes.
	for _, ov := range overlaps {
		from, to := max(ov.Start.UnixNano(), start), min(ov.End.UnixNano(), end)
		if len(ov.Owners) == 0 || to <= from {
			continue
		}
		first, _ := keytext.Visible(ov.Owners[0])
		second := first
		la, lb := laneOf(ov.Owners[0]), laneOf(ov.Owners[0])
		if len(ov.Owners) > 1 {
			second, _ = keytext.Visible(ov.Owners[1])
			lb = laneOf(ov.Owners[1])
		}
		length := fmtDuration(ov.End.Sub(ov.Start).Truncate(time.Millisecond))
		x0, x1 := xOf(from), xOf(to)
		v.Spans = append(v.Spans, tlSpan{X: f1(x0), W: f1(math.Max(tlMinSpanW, x1-x0)), Y: strconv.Itoa(la*tlLaneH + 6), H: strconv.Itoa(tlLaneH - 12),
			Tip: first + " worked on while " + second + " held the lock: " + length + " (" + ov.Cause + ")"})
		top, bottom := min(la, lb), max(la, lb)+1
		v.Overlaps = append(v.Overlaps, tlShade{X: f1(x0), W: f1(math.Max(tlMinSpanW, x1-x0)), Y: strconv.Itoa(top * tlLaneH),
			H: strconv.Itoa((bottom - top) * tlLaneH), LabelX: f1(x0 + 3), LabelY: strconv.Itoa(top*tlLaneH + 10), Label: "overlap " + length,
			Tip: "two holders at once: " + first + " and " + second + " for " + length + " (" + ov.Cause + "; " + state.Fencing(ov.WritesRefused) + ")"})
	}
	// Spans first in document order would be nicer for reading, but marks
	// must paint over spans; keep span order stable for tests.
	slices.SortStableFunc(v.Spans, func(a, b tlSpan) int { return strings.Compare(a.Y, b.Y) })

	for i := range v.Lanes {
		v.Lanes[i].Y = strconv.Itoa(i * tlLaneH)
		v.Lanes[i].TextY = f1(float64(i*tlLaneH) + tlLaneH/2 + 4)
	}
	plotH := len(v.Lanes) * tlLaneH
	v.H = plotH + tlAxisH
	v.From = fmtDuration(time.Duration(end - start).Round(time.Second))
	for i := 0; i <= 4; i++ {
		ts := start + int64(float64(end-start)*float64(i)/4)
		label := "-" + fmtDuration(time.Duration(end-ts).Round(tickRound(time.Duration(end-start))))
		if i == 4 {
			label = "now"
		}
		v.Ticks = append(v.Ticks, tlTick{X: f1(xOf(ts)), Label: label})
	}
	return v
}

// tickRound is the precision of axis labels for an axis spanning span.
func tickRound(span time.Duration) time.Duration {
	switch {
	case span < 10*time.Second:
		return 100 * time.Millisecond
	case span < 10*time.Minute:
		return time.Second
	default:
		return time.Minute
	}
}

func glyph(t event.Type) string {
	r := tlMarkR
	switch t {
	case event.Failed, event.RenewFailed, event.Lost: // a cross
		return "M" + f1(-r) + "," + f1(-r) + " L" + f1(r) + "," + f1(r) + " M" + f1(-r) + "," + f1(r) + " L" + f1(r) + "," + f1(-r)
	case event.Expired, event.Forced: // a diamond
		return "M0," + f1(-r-1) + " L" + f1(r+1) + ",0 L0," + f1(r+1) + " L" + f1(-r-1) + ",0 Z"
	case event.Requested: // a triangle
		return "M0," + f1(-r-1) + " L" + f1(r+1) + "," + f1(r) + " L" + f1(-r-1) + "," + f1(r) + " Z"
	case event.Renewed: // a small dot
		return "M-2,0 a2,2 0 1,0 4,0 a2,2 0 1,0 -4,0"
	default: // a circle
		return "M" + f1(-r) + ",0 a" + f1(r) + "," + f1(r) + " 0 1,0 " + f1(2*r) + ",0 a" + f1(r) + "," + f1(r) + " 0 1,0 " + f1(-2*r) + ",0"
	}
}

func f1(x float64) string { return strconv.FormatFloat(x, 'f', 1, 64) }
