package top

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/lockscope/lockscope/cmd/lockscope/internal/top/api"
)

// detail is one key's page, opened with Enter and refreshed with the rest.
type detail struct {
	key     string
	d       *api.LockDetail
	err     error
	at      time.Time // when d was fetched
	loading bool
	scroll  int
}

func (d *detail) set(v *api.LockDetail, err error, at time.Time) {
	d.loading = false
	if err != nil {
		d.err = err
		return // keep the last answer on screen, marked stale
	}
	d.d, d.err, d.at = v, nil, at
}

// detailLines is the detail's body: holder, since, TTL, waiters with
// their deadlines, recent events.
func (m *Model) detailLines(width int) []row {
	d := m.detail
	var out []row
	add := func(t tone, format string, args ...any) {
		out = append(out, row{line: fmt.Sprintf(format, args...), tone: t})
	}
	head := func(s string) { out = append(out, row{line: s, heading: true}) }
	add(toneNone, "%s", text(d.key))
	var se *api.StatusError
	switch {
	case d.d == nil && d.loading:
		add(toneDim, "Loading…")
		return out
	case d.d == nil && errors.As(d.err, &se) && se.Code == http.StatusNotFound:
		add(toneWarn, "Not tracked: no lock event names this key. %s", se.Message)
		return out
	case d.d == nil:
		add(toneBad, "Could not load the key: %v", d.err)
		return out
	case d.err != nil:
		add(toneBad, "Stale: the last refresh of this key failed (%v); shown as of %s", d.err, d.at.Format("15:04:05"))
	}
	v := d.d
	if v.Class != "" {
		out[0].line += "   class " + text(v.Class)
	}
	now := m.serverNow()
	h := v.Redis
	switch {
	case v.Semaphore != nil:
		add(toneNone, "A Redisson semaphore: its permits are on the dashboard's key page; it has no holder to release.")
	case h != nil:
		owner := text(api.Raw(h.Owner, h.OwnerB64))
		line := "Holder      " + owner
		if h.Lease != "" {
			line += "   lease " + text(h.Lease)
		}
		if h.Fence > 0 {
			line += fmt.Sprintf("   fence %d", h.Fence)
		}
		add(toneNone, "%s", line)
		if h.Since != nil {
			add(toneNone, "Since       %s UTC (held %s)", h.Since.UTC().Format("2006-01-02 15:04:05"), dur(now.Sub(*h.Since).Truncate(100*time.Millisecond)))
		} else if v.Since != nil {
			add(toneNone, "Since       %s UTC (held %s, as the collector saw it taken)", v.Since.UTC().Format("2006-01-02 15:04:05"), dur(secs(v.HeldFor).Truncate(100*time.Millisecond)))
		}
		add(toneNone, "TTL         %s", ttl(h.TTL, h.NoExpiry))
		if h.Fingerprint != "" {
			add(toneDim, "Fingerprint %s", h.Fingerprint)
		}
	case v.RedisHidden:
		add(toneWarn, "Redis holds a value of no known lock library's shape under this key: operators see it.")
	case v.RedisError != "":
		add(toneBad, "Redis could not be asked who holds it: %s", v.RedisError)
	case v.Held:
		add(toneWarn, "Holder      %s (as the collector saw it; Redis holds nothing now)", text(api.Raw(v.Owner, v.OwnerB64)))
	default:
		add(toneNone, "Not held now.")
	}
	if v.Stuck {
		add(toneBad, "STUCK: held past its threshold of %s", dur(secs(v.StuckAfter)))
	}
	head(fmt.Sprintf("WAITERS NOW (%d), oldest first", len(v.WaitersNow)))
	if len(v.WaitersNow) == 0 {
		add(toneDim, "  nobody waits")
	} else {
		cols := []column{{title: "OWNER", flex: 2, min: 10, max: 40}, {title: "WAITING", width: 8, right: true}, {title: "GIVES UP", width: 12}, {title: "HOLDS", flex: 1, min: 8, max: 20}}
		w := widths(cols, width)
		out = append(out, row{line: "  " + header(cols, w), tone: toneDim})
		for _, x := range v.WaitersNow {
			gives := "not known"
			if x.Deadline != nil {
				if left := x.Deadline.Sub(now); left > 0 {
					gives = "in " + dur(left.Truncate(time.Second))
				} else {
					gives = "passed"
				}
			}
			holds := "none"
			if len(x.Holds) > 0 {
				holds = plural(len(x.Holds), "lock", "locks")
			}
			out = append(out, row{line: "  " + layout(cols, w, []string{text(api.Raw(x.Owner, x.OwnerB64)), dur(secs(x.Waiting).Truncate(100 * time.Millisecond)), gives, holds})})
		}
	}
	head("RECENT EVENTS, newest first")
	if len(v.Recent) == 0 {
		add(toneDim, "  none kept")
	}
	for _, e := range v.Recent {
		parts := []string{e.At.UTC().Format("15:04:05.000"), fmt.Sprintf("%-12s", e.Type), text(e.Owner)}
		if e.Wait > 0 {
			parts = append(parts, "waited "+dur(secs(e.Wait)))
		}
		if e.Hold > 0 {
			parts = append(parts, "held "+dur(secs(e.Hold)))
		}
		if e.By != "" {
			parts = append(parts, "by "+text(e.By))
		}
		if e.Reason != "" {
			parts = append(parts, "reason: "+text(e.Reason))
		}
		tn := toneNone
		switch e.Type {
		case "expired", "lost", "forced", "renew_failed":
			tn = toneBad
		case "waiting", "failed":
			tn = toneWarn
		}
		out = append(out, row{line: "  " + strings.Join(parts, "  "), tone: tn})
	}
	return out
}
