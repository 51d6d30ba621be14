package dashboard

import (
	"strconv"
	"time"

	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/keytext"
)

// How pages tell of release requests: a requested event in a key's event
// list and timeline, and a release_request incident in the history.

// requestedDetail is the event list's detail of a requested event: who
// asked, why, the grace and whether anyone heard it.
func requestedDetail(e event.Event) string {
	by, _ := keytext.Visible(e.By)
	s := "asked by " + by
	if e.Wait > 0 {
		s += " · grace " + fmtDuration(e.Wait)
	}
	s += " · " + heardText(e.Count)
	if e.Reason != "" {
		rs, _ := keytext.Visible(e.Reason)
		s += " · reason: " + keytext.Cut(rs, 120)
	}
	return s
}

func heardText(n int64) string {
	switch {
	case n <= 0:
		return "nobody heard it"
	case n == 1:
		return "heard by 1 listener"
	}
	return "heard by " + strconv.FormatInt(n, 10) + " listeners"
}

// requestedTip is what a requested mark's tooltip adds to its time, type
// and owner (the operator and reason follow, as for any event).
func requestedTip(e event.Event) string {
	s := ""
	if e.Wait > 0 {
		s += " · grace " + fmtDuration(e.Wait)
	}
	return s + " · " + heardText(e.Count)
}

// requestSummary tells a release_request incident in one line: "asked at
// 03:02:00, released at 03:02:04", "asked at 03:02:30, no answer in 30s,
// forced at 03:03:00".
func requestSummary(in state.Incident, now time.Time) string {
	s := "asked at " + fmtClock(in.Start)
	switch {
	case in.Open():
		return s + ", no answer yet (" + fmtDuration(max(now.Sub(in.Start), 0).Truncate(time.Second)) + ")"
	case in.EndedBy == event.Released.String():
		return s + ", released at " + fmtClock(in.End)
	case in.EndedBy == event.Forced.String():
		return s + ", no answer in " + fmtDuration(in.End.Sub(in.Start).Truncate(time.Second)) + ", forced at " + fmtClock(in.End)
	}
	return s + ", no answer: " + in.EndedBy + " at " + fmtClock(in.End)
}
