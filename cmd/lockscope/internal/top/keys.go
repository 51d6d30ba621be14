package top

import (
	tea "github.com/charmbracelet/bubbletea"
)

// key handles a key press: the dialog's first, then the detail's, then
// the panes'.
func (m *Model) key(k tea.KeyMsg) (tea.Model, tea.Cmd) {
	s := k.String()
	if s == "ctrl+c" {
		return m, tea.Quit
	}
	if m.dialog != nil {
		return m, m.dialogKey(k)
	}
	if k.Type == tea.KeyRunes && len(k.Runes) > 1 && !k.Paste {
		// Keys typed faster than a read (or sent at once by tmux) come as
		// one message: each is a command of its own.
		var cmds []tea.Cmd
		for _, r := range k.Runes {
			_, cmd := m.key(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{r}, Alt: k.Alt})
			cmds = append(cmds, cmd)
		}
		return m, tea.Sequence(cmds...)
	}
	switch s {
	case "q":
		return m, tea.Quit
	case "p", " ":
		m.paused = !m.paused
		if !m.paused {
			return m, m.refresh()
		}
		return m, nil
	case "r":
		return m, m.refresh()
	case "f":
		return m, m.openAction(actRelease)
	case "a":
		return m, m.openAction(actAsk)
	}
	if s == "esc" {
		m.flash = flash{} // esc dismisses: the last outcome, then the detail
	}
	if m.detail != nil {
		switch s {
		case "esc", "backspace", "left", "h":
			m.detail = nil
		case "up", "k":
			m.detail.scroll = max(m.detail.scroll-1, 0)
		case "down", "j":
			m.detail.scroll++
		}
		return m, nil
	}
	switch s {
	case "tab", "right", "l":
		m.pane = (m.pane + 1) % numPanes
	case "shift+tab", "left", "h":
		m.pane = (m.pane + numPanes - 1) % numPanes
	case "1", "2", "3", "4", "5":
		m.pane = pane(s[0] - '1')
	case "up", "k":
		m.move(m.pane, -1)
	case "down", "j":
		m.move(m.pane, 1)
	case "pgup":
		m.move(m.pane, -m.bodyRows())
	case "pgdown":
		m.move(m.pane, m.bodyRows())
	case "home", "g":
		m.move(m.pane, -1<<30)
	case "end", "G":
		m.move(m.pane, 1<<30)
	case "s":
		if m.pane == paneHeld {
			m.sort = (m.sort + 1) % numSorts
			m.reselect(paneHeld)
		}
	case "enter":
		if r, ok := m.selected(); ok && r.key != "" {
			m.detail = &detail{key: r.key, loading: true}
			return m, fetchDetail(m.api, m.opt.Timeout, r.key)
		}
	}
	return m, nil
}

// actionKey is the key the actions work on: the open detail's, else the
// selected row's.
func (m *Model) actionKey() string {
	if m.detail != nil {
		return m.detail.key
	}
	if r, ok := m.selected(); ok {
		return r.key
	}
	return ""
}
