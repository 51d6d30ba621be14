package top

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/charmbracelet/x/ansi"
)

// View draws the screen: header with the overview's figures, banners
// (not ingesting, stale data, deadlocks), the tabs, the pane (or the
// detail, or the dialog), the last action's outcome and the keys. Every
// line fits the width; the whole fits the height (80×24 and up).
func (m *Model) View() string {
	w, h := max(m.width, 20), max(m.height, 5)
	top := m.headerLines(w)
	top = append(top, m.bannerLines(w)...)
	top = append(top, m.tabsLine())
	bottom := append(m.flashLines(w), m.keysLine())
	n := max(h-len(top)-len(bottom), 1)
	body := m.bodyLines(w, n)
	lines := append(top, body...)
	for len(lines) < h-len(bottom) {
		lines = append(lines, "")
	}
	lines = append(lines, bottom...)
	if len(lines) > h {
		lines = lines[:h]
	}
	for i, l := range lines {
		lines[i] = cut(l, w)
	}
	return strings.Join(lines, "\n")
}

// bodyRows is how many rows the pane has on screen now.
func (m *Model) bodyRows() int {
	w := max(m.width, 20)
	fixed := len(m.headerLines(w)) + len(m.bannerLines(w)) + 1 + len(m.flashLines(w)) + 1 + 1 // tabs, keys, column header
	return max(max(m.height, 5)-fixed, 1)
}

func (m *Model) headerLines(w int) []string {
	st := m.st
	title := st.title.Render("lockscope top") + " " + text(m.opt.URL)
	var state []string
	switch {
	case m.overview == nil:
		state = append(state, "connecting…")
	case m.overview.Ingesting:
		state = append(state, st.good.Render("● ingesting"))
	default:
		state = append(state, st.bad.Render("✗ not ingesting"))
	}
	if m.paused {
		state = append(state, st.warn.Render("PAUSED (p resumes)"))
	} else {
		state = append(state, "every "+dur(m.opt.Interval))
	}
	if !m.fetchedAt.IsZero() {
		state = append(state, m.fetchedAt.Format("15:04:05"))
	}
	lines := wrapCells(title, state, w)
	o := m.overview
	if o == nil {
		return lines
	}
	deadlocks := 0
	if m.blocking != nil {
		deadlocks = len(m.blocking.Deadlocks)
	}
	fig := func(label, value string, t tone) string {
		return label + " " + st.tone(t).Render(value)
	}
	cells := []string{
		fig("acq/s", strconv.FormatFloat(o.AcquireRate, 'f', 1, 64), toneNone),
		fig("contention", strconv.FormatFloat(o.ContentionRatio*100, 'f', 1, 64)+"%", toneIf(o.ContentionRatio >= 0.5, toneWarn)),
		fig("wait p99", dur(secs(o.WaitP99)), toneNone),
		fig("held", strconv.Itoa(o.Held), toneNone),
		fig("waiting", strconv.Itoa(o.Waiters), toneIf(o.Waiters > 0, toneWarn)),
		fig("stuck", strconv.Itoa(o.Stuck), toneIf(o.Stuck > 0, toneBad)),
		fig("expired/5m", strconv.FormatInt(o.Expirations5m, 10), toneIf(o.ExpiredWorking5m > 0, toneBad, toneIf(o.Expirations5m > 0, toneWarn))),
		fig("deadlocks", strconv.Itoa(deadlocks), toneIf(deadlocks > 0, toneBad)),
	}
	return append(lines, wrapCells("", cells, w)...)
}

// toneIf is t when cond holds, else the first of otherwise (or none).
func toneIf(cond bool, t tone, otherwise ...tone) tone {
	if cond {
		return t
	}
	if len(otherwise) > 0 {
		return otherwise[0]
	}
	return toneNone
}

// wrapCells joins first and cells with " · " into as few lines of width
// w as they take.
func wrapCells(first string, cells []string, w int) []string {
	var lines []string
	cur := first
	for _, c := range cells {
		sep := " · "
		if cur == "" {
			sep = ""
		}
		if cur != "" && lineWidth(cur+sep+c) > w {
			lines = append(lines, cur)
			cur, sep = "", ""
		}
		cur += sep + c
	}
	if cur != "" {
		lines = append(lines, cur)
	}
	return lines
}

func (m *Model) bannerLines(w int) []string {
	st := m.st
	var out []string
	if o := m.overview; o != nil && !o.Ingesting {
		out = append(out, st.bannerBad.Render(fit(" The collector is not ingesting: "+text(o.IngestError)+" ", w, false)))
	}
	if len(m.stale) > 0 {
		var parts []string
		for _, e := range m.stale {
			parts = append(parts, e.part)
		}
		since := "STALE, no data yet"
		if !m.okAt.IsZero() {
			since = "STALE since " + m.okAt.Format("15:04:05") + " (" + dur(m.opt.Now().Sub(m.okAt).Truncate(time.Second)) + " ago)"
		}
		msg := fmt.Sprintf(" %s: %s: %v ", since, strings.Join(parts, ", "), m.stale[0].err)
		out = append(out, st.bannerWarn.Render(fit(msg, w, false)))
	}
	if b := m.blocking; b != nil && len(b.Deadlocks) > 0 {
		var parts []string
		for _, mem := range b.Deadlocks[0] {
			parts = append(parts, fmt.Sprintf("%s holds %s, waits for %s", text(mem.Owner), text(mem.Holds), text(mem.WaitsFor)))
		}
		msg := " DEADLOCK: " + strings.Join(parts, "; ")
		if len(b.Deadlocks) > 1 {
			msg += fmt.Sprintf(" (and %d more: tab 2)", len(b.Deadlocks)-1)
		}
		out = append(out, st.bannerBad.Render(fit(msg+" ", w, false)))
	}
	return out
}

func (m *Model) tabsLine() string {
	var parts []string
	for p := range numPanes {
		label := strconv.Itoa(int(p)+1) + " " + paneNames[p]
		if n := m.count(p); n >= 0 {
			label += " " + strconv.Itoa(n)
		}
		if p == m.pane && m.detail == nil && m.dialog == nil {
			parts = append(parts, m.st.tabOn.Render("["+label+"]"))
		} else {
			parts = append(parts, " "+label+" ")
		}
	}
	return strings.Join(parts, " ")
}

// bodyLines is the pane, detail or dialog in n lines of width w.
func (m *Model) bodyLines(w, n int) []string {
	switch {
	case m.dialog != nil:
		return m.render(m.dialogLines(), -1, 0, w, n)
	case m.detail != nil:
		rows := m.detailLines(w)
		off := min(m.detail.scroll, max(len(rows)-n, 0))
		return m.render(rows, -1, off, w, n)
	}
	t := m.table(m.pane, w)
	var out []string
	if t.header != "" {
		out = append(out, m.st.dim.Render(strings.Repeat(" ", marker)+t.header))
		n--
	}
	if len(t.rows) == 0 {
		return append(out, "  "+m.st.dim.Render(t.empty))
	}
	if t.note != "" {
		n--
	}
	cur := m.cur[m.pane]
	if _, ok := m.selected(); !ok {
		cur = -1
	}
	off := 0
	if cur >= n {
		off = cur - n + 1
	}
	out = append(out, m.render(t.rows, cur, off, w, n)...)
	if t.note != "" {
		out = append(out, "  "+m.st.dim.Render(t.note))
	}
	return out
}

// render draws rows[off:] in at most n lines, the selected one (cur)
// marked with ">" (and reversed when colours are on).
func (m *Model) render(rows []row, cur, off, w, n int) []string {
	var out []string
	for i := off; i < len(rows) && len(out) < n; i++ {
		r := rows[i]
		line := r.line
		switch {
		case r.heading:
			line = m.st.title.Render(cut(line, w))
			if r.tone != toneNone {
				line = m.st.tone(r.tone).Bold(true).Render(cut(r.line, w))
			}
		case i == cur:
			line = m.st.sel.Render(fit("> "+line, w, false))
		default:
			pad := strings.Repeat(" ", marker)
			if r.id == "" {
				pad = ""
			}
			line = m.st.tone(r.tone).Render(cut(pad+line, w))
		}
		out = append(out, line)
	}
	return out
}

// flashLines is the last action's outcome, wrapped in up to 3 lines (one
// blank line when there is none).
func (m *Model) flashLines(w int) []string {
	if m.flash.text == "" {
		return []string{""}
	}
	st := m.st.r.NewStyle()
	switch m.flash.tone {
	case toneGood:
		st = m.st.flashGood
	case toneBad:
		st = m.st.flashBad
	case toneWarn:
		st = m.st.warn
	}
	lines := strings.Split(ansi.Wrap(m.flash.text, w, ""), "\n")
	if len(lines) > 3 {
		lines = lines[:3]
	}
	for i, l := range lines {
		lines[i] = st.Render(cut(l, w))
	}
	return lines
}

func (m *Model) keysLine() string {
	// The most needed first: a narrow screen cuts the rest.
	var keys []string
	switch {
	case m.dialog != nil && m.dialog.act == actAsk:
		keys = []string{"enter ask", "tab next field", "esc cancel"}
	case m.dialog != nil:
		keys = []string{"enter release", "esc cancel"}
	case m.detail != nil:
		keys = []string{"q quit", "esc back", "↑↓ scroll"}
	default:
		keys = []string{"q quit", "enter detail", "tab pane"}
		if m.pane == paneHeld {
			keys = append(keys, "s sort: "+sortNames[m.sort])
		}
	}
	if m.dialog == nil {
		if m.opt.Operator {
			keys = append(keys, "a ask", "f force")
		}
		keys = append(keys, "p pause", "r refresh")
		if m.detail == nil {
			keys = append(keys, "↑↓ select")
		}
	}
	return m.st.dim.Render(strings.Join(keys, " · "))
}

// lineWidth is s's width on screen, escape sequences excluded.
func lineWidth(s string) int { return ansi.StringWidth(s) }
