package top

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lockscope/lockscope/cmd/lockscope/internal/top/api"
)

// pane is one of the view's tabs.
type pane int

const (
	paneHeld pane = iota
	paneBlocking
	paneHot
	paneExpired
	paneIncidents
	numPanes
)

var paneNames = [numPanes]string{"Held", "Blocking", "Hot keys", "Expired", "Incidents"}

// heldSort is the held locks' order; s cycles through them.
type heldSort int

const (
	byAttention heldSort = iota // the serve's: stuck, then with waiters, then held, each by contentions
	byHeldFor
	byWaiters
	numSorts
)

var sortNames = [numSorts]string{"attention", "held for", "waiters"}

// table builds pane p's rows for a screen width columns wide.
func (m *Model) table(p pane, width int) table {
	switch p {
	case paneHeld:
		return m.heldTable(width)
	case paneBlocking:
		return m.blockingTable(width)
	case paneHot:
		return m.hotTable(width)
	case paneExpired:
		return m.expiredTable(width)
	case paneIncidents:
		return m.incidentsTable(width)
	}
	return table{}
}

// count is the number shown on pane p's tab; -1 for none.
func (m *Model) count(p pane) int {
	switch p {
	case paneHeld:
		if m.locks != nil {
			return m.locks.Total
		}
	case paneBlocking:
		if m.blocking != nil {
			return len(m.blocking.Holders)
		}
	case paneHot:
		if m.hot != nil {
			return len(m.hot.Keys)
		}
	case paneExpired:
		if m.overview != nil && m.overview.Expirations != nil {
			return len(m.overview.Expirations)
		}
	case paneIncidents:
		if m.incidents != nil {
			open := 0
			for _, in := range m.incidents.Incidents {
				if in.End == nil {
					open++
				}
			}
			return open
		}
	}
	return -1
}

var heldCols = []column{
	{title: "KEY", flex: 3, min: 12, max: 64},
	{title: "OWNER", flex: 2, min: 10, max: 40},
	{title: "HELD FOR", width: 8, right: true},
	{title: "TTL", width: 7, right: true},
	{title: "WAITERS", width: 7, right: true},
	{title: "STATE", width: 9},
}

func (m *Model) heldLocks() []api.LockInfo {
	if m.locks == nil {
		return nil
	}
	ls := slices.Clone(m.locks.Locks)
	switch m.sort {
	case byHeldFor:
		slices.SortStableFunc(ls, func(a, b api.LockInfo) int { return -cmpFloat(a.HeldFor, b.HeldFor) })
	case byWaiters:
		slices.SortStableFunc(ls, func(a, b api.LockInfo) int {
			if a.Waiters != b.Waiters {
				return b.Waiters - a.Waiters
			}
			return -cmpFloat(a.HeldFor, b.HeldFor)
		})
	}
	return ls
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (m *Model) heldTable(width int) table {
	w := widths(heldCols, width)
	t := table{header: header(heldCols, w), empty: "No lock is held now."}
	if m.locks == nil {
		t.empty = "Waiting for the first answer…"
		return t
	}
	for _, l := range m.heldLocks() {
		state, tn := "", toneNone
		switch {
		case l.Stuck:
			state, tn = "stuck", toneBad
		case l.NoExpiry:
			state, tn = "no ttl", toneWarn
		case l.Degraded:
			state = "degraded"
		case l.Passive:
			state = "watched"
		}
		if tn == toneNone && l.Waiters > 0 {
			tn = toneWarn
		}
		key := l.RawKey()
		t.rows = append(t.rows, row{id: key, key: key, tone: tn, line: layout(heldCols, w, []string{
			text(key), text(api.Raw(l.Owner, l.OwnerB64)), dur(secs(l.HeldFor).Truncate(100 * time.Millisecond)),
			ttl(l.TTL, l.NoExpiry), strconv.Itoa(l.Waiters), state,
		})})
	}
	if len(m.locks.Locks) < m.locks.Total {
		t.note = fmt.Sprintf("the %d that need attention most of %d held", len(m.locks.Locks), m.locks.Total)
	}
	return t
}

var blockingCols = []column{
	{title: "KEY", flex: 3, min: 12, max: 64},
	{title: "HOLDER", flex: 2, min: 10, max: 40},
	{title: "WAITERS", width: 7, right: true},
	{title: "WAITED", width: 8, right: true},
	{title: "HOLDER WAITS", width: 12},
}

func (m *Model) blockingTable(width int) table {
	t := table{empty: "Nobody waits for a lock now."}
	b := m.blocking
	if b == nil {
		t.empty = "Waiting for the first answer…"
		return t
	}
	if len(b.Deadlocks) > 0 {
		t.rows = append(t.rows, row{heading: true, tone: toneBad, line: fmt.Sprintf("DEADLOCKS: %s, each waiting for the next", plural(len(b.Deadlocks), "cycle", "cycles"))})
		for i, cyc := range b.Deadlocks {
			for j, mem := range cyc {
				arrow := "├"
				if j == len(cyc)-1 {
					arrow = "└"
				}
				if j == 0 {
					arrow = "┌"
				}
				line := fmt.Sprintf("%s %s holds %s, waits for %s (%s)", arrow, text(mem.Owner), text(mem.Holds), text(mem.WaitsFor), dur(m.serverNow().Sub(mem.Since).Truncate(100*time.Millisecond)))
				t.rows = append(t.rows, row{id: fmt.Sprintf("cycle %d:%d:%s", i, j, mem.Lease), key: mem.Holds, tone: toneBad, line: line})
			}
		}
	}
	if len(b.Holders) > 0 {
		w := widths(blockingCols, width)
		t.rows = append(t.rows, row{heading: true, line: "HOLDERS OTHERS WAIT FOR, most waiters first"})
		t.rows = append(t.rows, row{heading: true, tone: toneDim, line: "  " + header(blockingCols, w)})
		for _, h := range b.Holders {
			waits := ""
			if h.WaitsToo {
				waits = "yes"
			}
			key := h.RawKey()
			t.rows = append(t.rows, row{id: "holder " + key, key: key, tone: toneWarn, line: layout(blockingCols, w, []string{
				text(key), text(api.Raw(h.Owner, h.OwnerB64)), strconv.Itoa(h.Waiters), dur(secs(h.WaitSeconds).Truncate(100 * time.Millisecond)), waits,
			})})
		}
	}
	var chains []api.Chain
	for _, c := range b.Chains {
		if len(c.Links) > 2 && !c.Cycle { // a holder and one waiter is the table above
			chains = append(chains, c)
		}
	}
	if len(chains) > 0 {
		t.rows = append(t.rows, row{heading: true, line: "CHAINS: each waits for the next"})
		for _, c := range chains {
			var parts []string
			for _, l := range c.Links {
				p := text(api.Raw(l.Owner, l.OwnerB64))
				if l.WaitsFor != nil {
					p += " → " + text(*l.WaitsFor) + " →"
				} else {
					p += " (holds)"
				}
				parts = append(parts, p)
			}
			t.rows = append(t.rows, row{line: "  " + strings.Join(parts, " ")})
		}
	}
	return t
}

var hotCols = []column{
	{title: "KEY", flex: 3, min: 12, max: 64},
	{title: "CLASS", flex: 1, min: 8, max: 40},
	{title: "CONTENTIONS", width: 11, right: true},
	{title: "WAITED", width: 8, right: true},
	{title: "ACQUIRED", width: 8, right: true},
}

func (m *Model) hotTable(width int) table {
	w := widths(hotCols, width)
	t := table{header: header(hotCols, w), empty: "No contention in the last 5 minutes."}
	if m.hot == nil {
		t.empty = "Waiting for the first answer…"
		return t
	}
	for _, h := range m.hot.Keys {
		c, wt := "?", "?" // a watched key: its waits are not seen
		if h.Contentions != nil {
			c = strconv.FormatInt(*h.Contentions, 10)
		}
		if h.Wait != nil {
			wt = dur(secs(*h.Wait).Truncate(time.Millisecond))
		}
		key := h.RawKey()
		t.rows = append(t.rows, row{id: key, key: key, line: layout(hotCols, w, []string{
			text(key), text(h.Class), c, wt, strconv.FormatInt(h.Acquisitions, 10),
		})})
	}
	return t
}

var expiredCols = []column{
	{title: "KEY", flex: 3, min: 12, max: 64},
	{title: "OWNER", flex: 2, min: 10, max: 40},
	{title: "EXPIRED", width: 9, right: true},
	{title: "HELD", width: 7, right: true},
	{title: "THE HOLDER", width: 13},
}

func (m *Model) expiredTable(width int) table {
	w := widths(expiredCols, width)
	t := table{header: header(expiredCols, w), empty: "No lock expired while held lately."}
	switch {
	case m.overview == nil:
		t.empty = "Waiting for the first answer…"
		return t
	case m.overview.Expirations == nil:
		t.empty = "This serve does not list expirations (an older version): see its overview page."
		return t
	}
	now := m.serverNow()
	for _, e := range m.overview.Expirations {
		what, tn := "died or hangs", toneWarn
		if e.HolderWorking {
			what, tn = "still working", toneBad // two holders may have run at once
		}
		key := e.RawKey()
		t.rows = append(t.rows, row{id: key + "@" + e.At.String(), key: key, tone: tn, line: layout(expiredCols, w, []string{
			text(key), text(api.Raw(e.Owner, e.OwnerB64)), ago(now, e.At), dur(secs(e.Held).Truncate(100 * time.Millisecond)), what,
		})})
	}
	if m.overview.ExpiredWorking5m > 0 {
		t.note = fmt.Sprintf("%d in 5 min under a holder still at work: two holders may have run at once", m.overview.ExpiredWorking5m)
	}
	return t
}

var incidentCols = []column{
	{title: "KIND", width: 14},
	{title: "KEYS", flex: 3, min: 10, max: 80},
	{title: "OWNERS", flex: 2, min: 8, max: 60},
	{title: "STARTED", width: 9, right: true},
	{title: "ENDED", width: 9, right: true},
	{title: "HOW", flex: 1, min: 7, max: 40},
}

func (m *Model) incidentsTable(width int) table {
	w := widths(incidentCols, width)
	t := table{header: header(incidentCols, w), empty: "No incidents recorded."}
	if m.incidents == nil {
		t.empty = "Waiting for the first answer…"
		return t
	}
	now := m.serverNow()
	for _, in := range m.incidents.Incidents {
		keys := in.RawKeys()
		var shown []string
		for _, k := range keys {
			shown = append(shown, text(k))
		}
		var owners []string
		for _, o := range in.Owners {
			owners = append(owners, text(o))
		}
		ended, tn := "open", toneBad
		if in.End != nil {
			ended, tn = ago(now, *in.End), toneNone
		}
		kind := in.Kind
		if in.Count > 1 {
			kind += " ×" + strconv.Itoa(in.Count)
		}
		key := ""
		if len(keys) > 0 {
			key = keys[0]
		}
		t.rows = append(t.rows, row{id: in.ID, key: key, tone: tn, line: layout(incidentCols, w, []string{
			kind, strings.Join(shown, ", "), strings.Join(owners, ", "), ago(now, in.Start), ended, text(in.EndedBy),
		})})
	}
	return t
}
