package top

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/charmbracelet/bubbles/cursor"
	"github.com/charmbracelet/bubbles/textinput"
	tea "github.com/charmbracelet/bubbletea"

	"github.com/lockscope/lockscope/cmd/lockscope/internal/top/api"
)

// The operator actions, as the dashboard's release confirmation works:
// release (or ask about) what you saw. Pressing f or a fetches the key's
// holder from Redis now (with its fingerprint: operators see it), shows
// it and asks for a reason; the request quotes that fingerprint, so if
// the lock changed hands meanwhile the serve refuses and nothing happens.

type action int

const (
	actRelease action = iota
	actAsk
)

// maxReason is the serve's limit on a reason (dashboard.MaxReason).
const maxReason = 500

// dialog is the confirmation of one action on one key.
type dialog struct {
	act     action
	key     string
	loading bool // fetching the holder to show
	sending bool // the request is under way
	d       *api.LockDetail
	holder  *api.Holder // the holder shown: what the request quotes
	reason  textinput.Model
	grace   textinput.Model // ask only
	focus   int             // 0 reason, 1 grace
	err     string          // what is wrong with the input
}

// holderMsg carries the holder to confirm.
type holderMsg struct {
	key string
	d   *api.LockDetail
	err error
}

// actionMsg carries an action's outcome.
type actionMsg struct {
	act     action
	key     string
	shown   *api.Holder
	reason  string
	release *api.ReleaseResult
	ask     *api.AskResult
	grace   time.Duration
	err     error
}

// openAction starts act on the key selected (or open).
func (m *Model) openAction(act action) tea.Cmd {
	verb := "force release"
	if act == actAsk {
		verb = "asking a holder to release"
	}
	key := m.actionKey()
	switch {
	case !m.opt.Operator:
		m.flash = flash{verb + " needs operator credentials: --operator-token (LOCKSCOPE_OPERATOR_TOKEN) or --operator-user and --operator-password", toneBad}
		return nil
	case m.overview != nil && m.overview.ReadOnly:
		m.flash = flash{"this serve is read-only (it has no operator credentials configured): " + verb + " is disabled", toneBad}
		return nil
	case key == "":
		m.flash = flash{"select a lock first", toneWarn}
		return nil
	}
	m.dialog = &dialog{act: act, key: key, loading: true}
	a, timeout := m.api, m.opt.Timeout
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		d, err := a.Lock(ctx, key)
		return holderMsg{key, d, err}
	}
}

// holderShown fills the dialog with the holder Redis has now, or closes
// it saying why there is nothing to act on.
func (m *Model) holderShown(msg holderMsg) tea.Cmd {
	dg := m.dialog
	if dg == nil || dg.key != msg.key || !dg.loading {
		return nil
	}
	k := text(msg.key)
	switch {
	case msg.err != nil:
		m.dialog, m.flash = nil, flash{fmt.Sprintf("could not read who holds %s: %v", k, msg.err), toneBad}
		return nil
	case msg.d.Semaphore != nil:
		m.dialog, m.flash = nil, flash{k + " is a semaphore: it has no holder to release", toneWarn}
		return nil
	case msg.d.Redis == nil:
		m.dialog, m.flash = nil, flash{k + " is not held in Redis: nothing to release", toneWarn}
		return nil
	case msg.d.Redis.Fingerprint == "":
		m.dialog, m.flash = nil, flash{"the serve did not show the holder's fingerprint of " + k + ": it did not take the operator credentials", toneBad}
		return nil
	}
	dg.loading, dg.d, dg.holder = false, msg.d, msg.d.Redis
	dg.reason = newInput(m.st, "why (recorded with the event)")
	dg.reason.CharLimit = maxReason
	if dg.act == actAsk {
		dg.grace = newInput(m.st, "e.g. 30s; empty: the serve's default")
		dg.grace.CharLimit = 16
	}
	dg.resize(m.width)
	return dg.reason.Focus()
}

func newInput(st styles, placeholder string) textinput.Model {
	in := textinput.New()
	in.Placeholder = placeholder
	in.Prompt = "> "
	// Every style through the view's renderer: no escape sequences when
	// colours are off.
	in.PromptStyle, in.TextStyle = st.r.NewStyle(), st.r.NewStyle()
	in.PlaceholderStyle, in.CompletionStyle = st.dim, st.dim
	in.Cursor.Style, in.Cursor.TextStyle = st.r.NewStyle(), st.r.NewStyle()
	in.Cursor.SetMode(cursor.CursorStatic) // no blink: nothing redraws for it
	return in
}

func (dg *dialog) resize(width int) {
	w := max(width-12, 10)
	dg.reason.Width, dg.grace.Width = w, min(w, 40)
}

// update passes a message other than a key to the focused input.
func (dg *dialog) update(msg tea.Msg) tea.Cmd {
	if dg.loading || dg.sending {
		return nil
	}
	var cmd tea.Cmd
	if dg.focus == 1 {
		dg.grace, cmd = dg.grace.Update(msg)
	} else {
		dg.reason, cmd = dg.reason.Update(msg)
	}
	return cmd
}

func (m *Model) dialogKey(k tea.KeyMsg) tea.Cmd {
	dg := m.dialog
	switch k.String() {
	case "esc":
		m.dialog = nil
		m.flash = flash{"cancelled: nothing was sent", toneNone}
		return nil
	case "tab", "shift+tab", "down", "up":
		if dg.act == actAsk && !dg.loading {
			dg.focus = 1 - dg.focus
			if dg.focus == 1 {
				dg.reason.Blur()
				return dg.grace.Focus()
			}
			dg.grace.Blur()
			return dg.reason.Focus()
		}
		return nil
	case "enter":
		return m.submit()
	}
	return dg.update(k)
}

// submit checks the input and sends the action quoting the holder shown.
func (m *Model) submit() tea.Cmd {
	dg := m.dialog
	if dg.loading || dg.sending {
		return nil
	}
	reason := strings.TrimSpace(dg.reason.Value())
	var grace time.Duration
	switch {
	case reason == "":
		dg.err = "a reason is required: say why"
		return nil
	case len(reason) > maxReason || !utf8.ValidString(reason):
		dg.err = fmt.Sprintf("the reason must be UTF-8 text of at most %d bytes", maxReason)
		return nil
	}
	if dg.act == actAsk {
		if g := strings.TrimSpace(dg.grace.Value()); g != "" {
			var err error
			if grace, err = time.ParseDuration(g); err != nil || grace <= 0 {
				dg.err = "the grace must be a duration such as 30s or 2m, or empty"
				return nil
			}
		}
	}
	dg.err, dg.sending = "", true
	a, timeout := m.api, m.opt.Timeout
	act, key, fp, shown := dg.act, dg.key, dg.holder.Fingerprint, dg.holder
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		out := actionMsg{act: act, key: key, shown: shown, reason: reason, grace: grace}
		if act == actAsk {
			out.ask, out.err = a.Ask(ctx, key, fp, reason, grace)
		} else {
			out.release, out.err = a.Release(ctx, key, fp, reason)
		}
		return out
	}
}

// actionDone closes the dialog with the outcome and refreshes.
func (m *Model) actionDone(msg actionMsg) tea.Cmd {
	if m.dialog == nil || m.dialog.key != msg.key || !m.dialog.sending {
		return nil
	}
	m.dialog = nil
	m.flash = outcome(msg)
	return m.refresh()
}

// outcome is what an action's answer means, in one line.
func outcome(msg actionMsg) flash {
	k := text(msg.key)
	who := text(api.Raw(msg.shown.Owner, msg.shown.OwnerB64))
	nothing := "nothing was released"
	if msg.act == actAsk {
		nothing = "nothing was asked"
	}
	var current *api.Holder
	switch {
	case msg.release != nil && msg.release.Current != nil:
		current = msg.release.Current
	case msg.ask != nil && msg.ask.Current != nil:
		current = msg.ask.Current
	}
	var se *api.StatusError
	switch {
	case errors.Is(msg.err, api.ErrOwnerChanged):
		now := "someone else"
		if current != nil {
			now = fmt.Sprintf("%s (fingerprint %s)", text(api.Raw(current.Owner, current.OwnerB64)), short(current.Fingerprint, 12))
		}
		return flash{fmt.Sprintf("Owner changed: %s is now held by %s, not %s; %s", k, now, who, nothing), toneBad}
	case errors.Is(msg.err, api.ErrNotSupported) && msg.act == actAsk:
		return flash{"This serve cannot ask a holder to release (it has no POST /api/v1/locks/{key}/ask: an older version); nothing was asked. Force-release with f instead.", toneBad}
	case errors.Is(msg.err, api.ErrNotHeld):
		return flash{fmt.Sprintf("%s is no longer held; %s", k, nothing), toneWarn}
	case errors.Is(msg.err, api.ErrUnauthorized):
		return flash{"the serve refused the operator credentials; " + nothing, toneBad}
	case errors.As(msg.err, &se):
		return flash{fmt.Sprintf("the serve refused: %s; %s", se.Error(), nothing), toneBad}
	case msg.err != nil:
		return flash{fmt.Sprintf("the request failed: %v; nothing is known to have changed", msg.err), toneBad}
	case msg.act == actAsk:
		g := ""
		if msg.ask.Grace > 0 {
			g = fmt.Sprintf(" within %s", dur(secs(msg.ask.Grace)))
		} else if msg.grace > 0 {
			g = fmt.Sprintf(" within %s", dur(msg.grace))
		}
		return flash{fmt.Sprintf("Asked %s to release %s%s: %s", who, k, g, text(msg.reason)), toneGood}
	}
	by := text(msg.release.By)
	return flash{fmt.Sprintf("Released %s (held by %s), recorded as forced by %s: %s", k, who, by, text(msg.reason)), toneGood}
}

// dialogLines is the confirmation: the key, the holder Redis has now, its
// fingerprint, the waiters, and the reason (and grace) to type.
func (m *Model) dialogLines() []row {
	dg := m.dialog
	var out []row
	add := func(t tone, format string, args ...any) {
		out = append(out, row{line: fmt.Sprintf(format, args...), tone: t})
	}
	k := text(dg.key)
	if dg.loading {
		add(toneNone, "Reading who holds %s now…", k)
		return out
	}
	h := dg.holder
	who := text(api.Raw(h.Owner, h.OwnerB64))
	if dg.act == actAsk {
		out = append(out, row{line: fmt.Sprintf("Ask %s to release %s?", who, k), heading: true})
	} else {
		out = append(out, row{line: fmt.Sprintf("Force-release %s?", k), heading: true})
	}
	line := "  Holder       " + who
	if h.Lease != "" {
		line += "   lease " + text(h.Lease)
	}
	add(toneNone, "%s", line)
	if h.Since != nil {
		add(toneNone, "  Held for     %s", dur(m.serverNow().Sub(*h.Since).Truncate(time.Second)))
	}
	add(toneNone, "  TTL left     %s", ttl(h.TTL, h.NoExpiry))
	add(toneNone, "  Fingerprint  %s", short(h.Fingerprint, 12))
	add(toneNone, "  Waiters      %d", len(dg.d.WaitersNow))
	if dg.act == actAsk {
		add(toneDim, "The holder is asked to release it; the request is recorded with your reason.")
	} else {
		add(toneWarn, "Its holder loses the lock at its next renewal; waiters can take it. Recorded with your reason.")
	}
	add(toneDim, "It goes through only while this holder still holds the lock.")
	out = append(out, row{line: "Reason " + dg.reason.View()})
	if dg.act == actAsk {
		out = append(out, row{line: "Grace  " + dg.grace.View()})
	}
	if dg.err != "" {
		add(toneBad, "%s", dg.err)
	}
	if dg.sending {
		add(toneDim, "Sending…")
	}
	return out
}
