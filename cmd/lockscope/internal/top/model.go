package top

import (
	"time"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/lockscope/lockscope/cmd/lockscope/internal/top/api"
)

// Model is the view's state: the latest answer of each part, the pane
// shown, the selection in each pane (by row id), and the open detail or
// action dialog. Its memory is one answer of each part (see heldLimit).
type Model struct {
	api API
	opt Options
	st  styles

	width, height int

	// The latest answer of each part; a failed refresh keeps the previous.
	overview  *api.Overview
	locks     *api.LockPage
	hot       *api.HotKeys
	blocking  *api.Blocking
	incidents *api.Incidents
	fetchedAt time.Time   // when the latest refresh ended
	okAt      time.Time   // when the latest refresh without a failure ended
	stale     []partError // the latest refresh's failures
	fetching  bool
	paused    bool

	pane pane
	sort heldSort
	sel  [numPanes]string // selected row id per pane
	cur  [numPanes]int    // its index, to fall back on when the row goes

	detail *detail
	dialog *dialog
	flash  flash
}

// flash is the one-line outcome of the last action.
type flash struct {
	text string
	tone tone
}

// tickMsg is the refresh timer.
type tickMsg time.Time

// New returns the view's model; Run shows it.
func New(a API, opt Options) *Model {
	if opt.Interval <= 0 {
		opt.Interval = 2 * time.Second
	}
	if opt.Timeout <= 0 {
		opt.Timeout = 5 * time.Second
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	return &Model{api: a, opt: opt, st: newStyles(opt.Profile), width: 80, height: 24, fetching: true}
}

// Init starts the first refresh and the timer.
func (m *Model) Init() tea.Cmd {
	return tea.Batch(fetch(m.api, m.opt.Timeout, m.opt.Now, ""), m.tick())
}

func (m *Model) tick() tea.Cmd {
	return tea.Tick(m.opt.Interval, func(t time.Time) tea.Msg { return tickMsg(t) })
}

// refresh starts a refresh unless one is under way.
func (m *Model) refresh() tea.Cmd {
	if m.fetching {
		return nil
	}
	m.fetching = true
	key := ""
	if m.detail != nil {
		key = m.detail.key
	}
	return fetch(m.api, m.opt.Timeout, m.opt.Now, key)
}

// Update handles one message.
func (m *Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.width, m.height = msg.Width, msg.Height
		if m.dialog != nil {
			m.dialog.resize(m.width)
		}
		return m, nil
	case tickMsg:
		var cmd tea.Cmd
		if !m.paused {
			cmd = m.refresh()
		}
		return m, tea.Batch(cmd, m.tick())
	case dataMsg:
		m.apply(msg.snap)
		return m, nil
	case detailMsg:
		if m.detail != nil && m.detail.key == msg.key {
			m.detail.set(msg.d, msg.err, m.opt.Now())
		}
		return m, nil
	case holderMsg:
		return m, m.holderShown(msg)
	case actionMsg:
		return m, m.actionDone(msg)
	case tea.KeyMsg:
		return m.key(msg)
	}
	if m.dialog != nil {
		return m, m.dialog.update(msg)
	}
	return m, nil
}

// apply takes a refresh's answers: each part that came replaces the one
// shown, each that failed keeps it, marked stale.
func (m *Model) apply(s snapshot) {
	m.fetching = false
	m.fetchedAt = s.at
	m.stale = s.errs
	if len(s.errs) == 0 {
		m.okAt = s.at
	}
	if s.overview != nil {
		m.overview = s.overview
	}
	if s.locks != nil {
		m.locks = s.locks
	}
	if s.hot != nil {
		m.hot = s.hot
	}
	if s.blocking != nil {
		m.blocking = s.blocking
	}
	if s.incidents != nil {
		m.incidents = s.incidents
	}
	if m.detail != nil && s.detailKey == m.detail.key {
		m.detail.set(s.detail, s.detailErr, s.at)
	}
	for p := range numPanes {
		m.reselect(p)
	}
}

// serverNow is the serve's clock now, as far as its latest overview says:
// ages of expirations and incidents are the serve's timestamps, and this
// machine's clock may differ.
func (m *Model) serverNow() time.Time {
	now := m.opt.Now()
	if m.overview != nil && m.overview.At != nil && !m.fetchedAt.IsZero() {
		return m.overview.At.Add(now.Sub(m.fetchedAt))
	}
	return now
}

// reselect finds pane p's selected row again after its rows changed: the
// same id wherever it went, else the row now where it was (its neighbour),
// skipping headings.
func (m *Model) reselect(p pane) {
	rows := m.table(p, m.width).rows
	for i, r := range rows {
		if r.selectable() && r.id == m.sel[p] {
			m.cur[p] = i
			return
		}
	}
	m.cur[p] = min(m.cur[p], len(rows)-1)
	m.moveTo(p, rows, m.cur[p], 1)
}

// moveTo selects the first selectable row from i on in direction dir
// (then the other way), or none.
func (m *Model) moveTo(p pane, rows []row, i, dir int) {
	for _, d := range []int{dir, -dir} {
		for j := i; j >= 0 && j < len(rows); j += d {
			if rows[j].selectable() {
				m.cur[p], m.sel[p] = j, rows[j].id
				return
			}
		}
	}
	m.cur[p], m.sel[p] = 0, ""
}

// move moves pane p's selection by n selectable rows (negative: up).
func (m *Model) move(p pane, n int) {
	rows := m.table(p, m.width).rows
	i := m.cur[p]
	dir := 1
	if n < 0 {
		dir, n = -1, -n
	}
	for ; n > 0; n-- {
		j := i + dir
		for j >= 0 && j < len(rows) && !rows[j].selectable() {
			j += dir
		}
		if j < 0 || j >= len(rows) {
			break
		}
		i = j
	}
	if i >= 0 && i < len(rows) && rows[i].selectable() {
		m.cur[p], m.sel[p] = i, rows[i].id
	}
}

// selected is the selected row of the pane shown, if any.
func (m *Model) selected() (row, bool) {
	rows := m.table(m.pane, m.width).rows
	i := m.cur[m.pane]
	if i < 0 || i >= len(rows) || !rows[i].selectable() || rows[i].id != m.sel[m.pane] {
		return row{}, false
	}
	return rows[i], true
}
