package top

import (
	"errors"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/ansi"
	"github.com/muesli/termenv"

	"github.com/lockscope/lockscope/cmd/lockscope/internal/top/api"
)

// These tests drive the model with messages, as Bubble Tea does, and read
// its View: no terminal and no serve (the binary's tests in cmd/lockscope
// drive the real thing through tmux). The commands Update returns are not
// run: they would call the API.

var t0 = time.Date(2026, 3, 14, 9, 26, 53, 0, time.UTC)

func newModel(t *testing.T, opt Options) *Model {
	t.Helper()
	if opt.Now == nil {
		opt.Now = func() time.Time { return t0 }
	}
	if opt.Profile == termenv.TrueColor { // the zero value: these tests read plain text
		opt.Profile = termenv.Ascii
	}
	if opt.URL == "" {
		opt.URL = "http://lockscope:8080"
	}
	m := New(nil, opt)
	m.Update(tea.WindowSizeMsg{Width: 80, Height: 24})
	return m
}

func held(key, owner string, heldFor float64, waiters int) api.LockInfo {
	since := t0.Add(-secs(heldFor))
	return api.LockInfo{Key: key, Held: true, Owner: owner, Since: &since, HeldFor: heldFor, TTL: 30, Waiters: waiters}
}

// snap is a refresh that answered every part.
func snap(locks ...api.LockInfo) dataMsg {
	at := t0
	return dataMsg{snapshot{
		at:        t0,
		overview:  &api.Overview{At: &at, Ingesting: true, Held: len(locks), Expirations: []api.Expiration{}},
		locks:     &api.LockPage{Total: len(locks), Locks: locks},
		hot:       &api.HotKeys{},
		blocking:  &api.Blocking{},
		incidents: &api.Incidents{},
	}}
}

func press(m *Model, keys ...string) tea.Cmd {
	var cmd tea.Cmd
	for _, k := range keys {
		var msg tea.KeyMsg
		switch k {
		case "enter":
			msg = tea.KeyMsg{Type: tea.KeyEnter}
		case "esc":
			msg = tea.KeyMsg{Type: tea.KeyEsc}
		case "down":
			msg = tea.KeyMsg{Type: tea.KeyDown}
		case "up":
			msg = tea.KeyMsg{Type: tea.KeyUp}
		case "tab":
			msg = tea.KeyMsg{Type: tea.KeyTab}
		default:
			msg = tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(k)}
		}
		_, cmd = m.Update(msg)
	}
	return cmd
}

func selectedKey(m *Model) string {
	r, _ := m.selected()
	return r.key
}

// The selection stays on the same key when a refresh adds rows above it,
// and when the order changes; when its key goes, the row now in its place
// is selected.
func TestSelectionFollowsTheKeyAcrossRefreshes(t *testing.T) {
	m := newModel(t, Options{})
	m.Update(snap(held("a", "o", 1, 0), held("b", "o", 2, 0), held("c", "o", 3, 0)))
	if got := selectedKey(m); got != "a" {
		t.Fatalf("selected after the first refresh = %q, want the first row a", got)
	}
	press(m, "down")
	if got := selectedKey(m); got != "b" {
		t.Fatalf("selected after down = %q, want b", got)
	}
	m.Update(snap(held("new", "o", 0.5, 3), held("a", "o", 1, 0), held("b", "o", 2, 0), held("c", "o", 3, 0)))
	if got := selectedKey(m); got != "b" {
		t.Errorf("selected after a lock appeared above = %q, want b still", got)
	}
	press(m, "s") // by held for: c, b, a, new
	if got, want := rowKeys(m), "c b a new"; got != want {
		t.Errorf("held locks by held for = %q, want %q", got, want)
	}
	if got := selectedKey(m); got != "b" {
		t.Errorf("selected after sorting = %q, want b still", got)
	}
	press(m, "s") // by waiters: new first
	if got, want := rowKeys(m), "new c b a"; got != want {
		t.Errorf("held locks by waiters = %q, want %q", got, want)
	}
	press(m, "s")
	if got, want := rowKeys(m), "new a b c"; got != want {
		t.Errorf("held locks by attention (the serve's order) = %q, want %q", got, want)
	}
	// b (at index 2) is released: the row now at index 2 is selected.
	m.Update(snap(held("new", "o", 1, 3), held("a", "o", 1, 0), held("c", "o", 3, 0)))
	if got := selectedKey(m); got != "c" {
		t.Errorf("selected after b went = %q, want its neighbour c", got)
	}
	if v := m.View(); !strings.Contains(v, "> c") {
		t.Errorf("the view does not mark c as selected:\n%s", v)
	}
}

// Keys that arrive in one read ("1ss", as a fast typist or tmux sends
// them) each do what they do alone.
func TestKeysTypedAtOnce(t *testing.T) {
	m := newModel(t, Options{})
	m.Update(snap(held("a", "o", 1, 0), held("b", "o", 2, 5)))
	m.pane = paneHot
	m.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("1ss")})
	if m.pane != paneHeld || m.sort != byWaiters {
		t.Errorf("\"1ss\" at once: pane %v, sort %v; want the held pane sorted by waiters", paneNames[m.pane], sortNames[m.sort])
	}
}

func rowKeys(m *Model) string {
	var keys []string
	for _, r := range m.table(paneHeld, 80).rows {
		keys = append(keys, r.key)
	}
	return strings.Join(keys, " ")
}

// busy is a picture with something in every pane: many held locks, a
// deadlock, chains, expirations, incidents.
func busy() dataMsg {
	var locks []api.LockInfo
	for i := range 60 {
		l := held("workflow:"+strings.Repeat("9", i%7)+"-"+string(rune('a'+i%26)), "workflow-editor/pod-"+strings.Repeat("x", i%30), float64(i), i%4)
		l.Stuck = i == 3
		locks = append(locks, l)
	}
	s := snap(locks...)
	s.snap.locks.Total = 600
	ledger, account := "ledger:account-501", "ledger:account-502"
	s.snap.blocking = &api.Blocking{
		Waiters: 5,
		Holders: []api.BlockingHolder{{Key: "invoice:42", Owner: "billing-batch/pod-1", Waiters: 3, WaitSeconds: 12}},
		Chains:  []api.Chain{{Links: []api.ChainLink{{Owner: "a", WaitsFor: &ledger}, {Owner: "b", WaitsFor: &account}, {Owner: "c"}}}},
		Deadlocks: [][]api.DeadlockMember{{
			{Owner: "svc-a", Lease: "la", Holds: ledger, WaitsFor: account, Since: t0.Add(-3 * time.Second)},
			{Owner: "svc-b", Lease: "lb", Holds: account, WaitsFor: ledger, Since: t0.Add(-3 * time.Second)},
		}},
	}
	s.snap.overview.Expirations = []api.Expiration{{Key: "invoice:batch-2", Owner: "billing-batch/pod-2", At: t0.Add(-time.Minute), Held: 12, HolderWorking: true}}
	s.snap.overview.ExpiredWorking5m = 1
	s.snap.incidents = &api.Incidents{Incidents: []api.Incident{{ID: "i1", Kind: "deadlock", Keys: []string{ledger, account}, Owners: []string{"svc-a", "svc-b"}, Start: t0.Add(-3 * time.Second)}}}
	s.snap.errs = []partError{{"hot keys", errors.New("GET /api/v1/hotkeys: connection refused")}}
	return s
}

// Every screen fits: as many lines as the terminal has, none wider, the
// title first and the keys last, at 80×24 and at 200×50, on every pane,
// the detail and the dialog.
func TestViewFitsTheScreen(t *testing.T) {
	for _, size := range []struct{ w, h int }{{80, 24}, {200, 50}, {40, 12}} {
		m := newModel(t, Options{Operator: true})
		m.Update(tea.WindowSizeMsg{Width: size.w, Height: size.h})
		m.Update(busy())
		check := func(what string) {
			t.Helper()
			v := m.View()
			lines := strings.Split(v, "\n")
			if len(lines) != size.h {
				t.Errorf("%d×%d %s: %d lines, want %d:\n%s", size.w, size.h, what, len(lines), size.h, v)
			}
			for i, l := range lines {
				if w := ansi.StringWidth(l); w > size.w {
					t.Errorf("%d×%d %s: line %d is %d columns wide: %q", size.w, size.h, what, i+1, w, l)
				}
			}
			if !strings.HasPrefix(lines[0], "lockscope top") || !strings.HasPrefix(lines[len(lines)-1], "q quit") && m.dialog == nil {
				t.Errorf("%d×%d %s: first line %q, last %q; want the title first and the keys last", size.w, size.h, what, lines[0], lines[len(lines)-1])
			}
		}
		for p := range numPanes {
			m.pane = p
			check(paneNames[p])
		}
		m.pane = paneHeld
		press(m, "down", "down", "down")
		press(m, "enter")
		m.Update(detailMsg{key: m.detail.key, d: &api.LockDetail{LockInfo: held(m.detail.key, "o", 3, 2), Redis: &api.Holder{Owner: "o", Fingerprint: strings.Repeat("ab", 20)},
			WaitersNow: []api.Waiter{{Owner: "w1", Waiting: 2}, {Owner: "w2", Waiting: 1}}}})
		check("detail")
		press(m, "esc")
		press(m, "f")
		m.Update(holderMsg{key: m.dialog.key, d: &api.LockDetail{Redis: &api.Holder{Owner: "o", Fingerprint: strings.Repeat("ab", 20)}}})
		check("dialog")
	}
}

// At 200 columns the figures stand on one line; at 80 they wrap.
func TestFiguresLine(t *testing.T) {
	m := newModel(t, Options{})
	m.Update(busy())
	m.Update(tea.WindowSizeMsg{Width: 200, Height: 50})
	lines := strings.Split(m.View(), "\n")
	if !strings.Contains(lines[1], "acq/s") || !strings.Contains(lines[1], "deadlocks 1") {
		t.Errorf("200 columns: figures line = %q, want acq/s … deadlocks 1 on one line", lines[1])
	}
	m.Update(tea.WindowSizeMsg{Width: 80, Height: 24})
	lines = strings.Split(m.View(), "\n")
	if strings.Contains(lines[1], "deadlocks") || !strings.Contains(lines[2], "deadlocks 1") {
		t.Errorf("80 columns: figures lines = %q, %q; want them wrapped, deadlocks on the second", lines[1], lines[2])
	}
}

// With colours off (NO_COLOR) the screen carries no escape sequence at
// all, dialog included; with colours on it does.
func TestNoColourMeansNoEscapes(t *testing.T) {
	for _, tc := range []struct {
		profile termenv.Profile
		want    bool
	}{{termenv.Ascii, false}, {termenv.ANSI256, true}} {
		m := newModel(t, Options{Profile: tc.profile, Operator: true})
		m.Update(busy())
		views := []string{m.View()}
		press(m, "f")
		m.Update(holderMsg{key: m.dialog.key, d: &api.LockDetail{Redis: &api.Holder{Owner: "o", Fingerprint: "abc"}}})
		press(m, "x")
		views = append(views, m.View())
		for i, v := range views {
			if got := strings.Contains(v, "\x1b["); got != tc.want {
				t.Errorf("profile %v, view %d: escape sequences %v, want %v:\n%q", tc.profile, i, got, tc.want, v)
			}
		}
	}
}

// A key or owner with control characters cannot write to the terminal:
// it is drawn escaped.
func TestKeysAreEscaped(t *testing.T) {
	m := newModel(t, Options{Profile: termenv.Ascii})
	m.Update(snap(held("evil\x1b[2J\x07", "own\ner", 1, 0)))
	v := m.View()
	if strings.ContainsAny(v, "\x1b\x07") || !strings.Contains(v, `evil\x1b[2J\x07`) {
		t.Errorf("view of a key with ESC and BEL: want them escaped as text:\n%q", v)
	}
}

// A refresh that fails keeps what was shown and says so; the next good
// one clears the banner. A healthy refresh shows none.
func TestStaleBanner(t *testing.T) {
	now := t0
	m := newModel(t, Options{Now: func() time.Time { return now }})
	m.Update(snap(held("invoice:42", "billing/pod-1", 5, 3)))
	if v := m.View(); strings.Contains(v, "STALE") {
		t.Errorf("healthy refresh shows a stale banner:\n%s", v)
	}
	now = t0.Add(4 * time.Second)
	m.Update(dataMsg{snapshot{at: now, errs: []partError{
		{"overview", errors.New("connection refused")}, {"held locks", errors.New("connection refused")},
	}}})
	v := m.View()
	if !strings.Contains(v, "STALE since 09:26:53 (4s ago): overview, held locks: connection refused") || !strings.Contains(v, "invoice:42") {
		t.Errorf("failed refresh: want the stale banner naming the parts and the time of the data, and invoice:42 still shown:\n%s", v)
	}
	m.Update(snap(held("invoice:42", "billing/pod-1", 9, 3)))
	if v := m.View(); strings.Contains(v, "STALE") {
		t.Errorf("the banner stays after a good refresh:\n%s", v)
	}
}

// The deadlock banner names both sides; the blocking pane lists each
// member with what it holds and waits for.
func TestDeadlockShown(t *testing.T) {
	m := newModel(t, Options{})
	m.Update(tea.WindowSizeMsg{Width: 200, Height: 50})
	m.Update(busy())
	v := m.View()
	if !strings.Contains(v, "DEADLOCK: svc-a holds ledger:account-501, waits for ledger:account-502; svc-b holds ledger:account-502, waits for ledger:account-501") {
		t.Errorf("deadlock banner missing or wrong:\n%s", v)
	}
	press(m, "2")
	v = m.View()
	for _, want := range []string{"DEADLOCKS: 1 cycle", "svc-a holds ledger:account-501, waits for ledger:account-502 (3s)", "invoice:42", "a → ledger:account-501 → b → ledger:account-502 → c (holds)"} {
		if !strings.Contains(v, want) {
			t.Errorf("blocking pane lacks %q:\n%s", want, v)
		}
	}
	m.Update(snap())
	if v := m.View(); strings.Contains(v, "DEADLOCK") {
		t.Errorf("deadlock shown after it ended:\n%s", v)
	}
}

// Without operator credentials, or on a read-only serve, the actions
// say why they are not offered and send nothing.
func TestActionsNeedAnOperator(t *testing.T) {
	m := newModel(t, Options{})
	m.Update(snap(held("invoice:42", "billing/pod-1", 5, 3)))
	if cmd := press(m, "f"); cmd != nil || m.dialog != nil || !strings.Contains(m.flash.text, "needs operator credentials") {
		t.Errorf("f as a viewer: dialog %v, flash %q, want none and a word on credentials", m.dialog, m.flash.text)
	}
	m = newModel(t, Options{Operator: true})
	s := snap(held("invoice:42", "billing/pod-1", 5, 3))
	s.snap.overview.ReadOnly = true
	m.Update(s)
	if cmd := press(m, "a"); cmd != nil || m.dialog != nil || !strings.Contains(m.flash.text, "read-only") {
		t.Errorf("a on a read-only serve: dialog %v, flash %q, want none and read-only", m.dialog, m.flash.text)
	}
}

// The release confirmation names the holder Redis has now and its
// fingerprint, wants a reason, and reports what the serve answered:
// released, or owner changed naming the new holder.
func TestReleaseDialog(t *testing.T) {
	m := newModel(t, Options{Operator: true})
	m.Update(snap(held("invoice:42", "billing/pod-1", 5, 3)))
	if cmd := press(m, "f"); cmd == nil || m.dialog == nil || !m.dialog.loading {
		t.Fatalf("f: want a dialog reading the holder")
	}
	shown := &api.Holder{Owner: "billing/pod-1", Lease: "l1", Fingerprint: "3f2a9c1b2d4e5f60718293a4b5c6d7e8f9012345", TTL: 25}
	m.Update(holderMsg{key: "invoice:42", d: &api.LockDetail{Redis: shown, WaitersNow: make([]api.Waiter, 3)}})
	v := m.View()
	for _, want := range []string{"Force-release invoice:42?", "billing/pod-1", "3f2a9c1b2d4e", "Waiters      3"} {
		if !strings.Contains(v, want) {
			t.Errorf("confirmation lacks %q:\n%s", want, v)
		}
	}
	if cmd := press(m, "enter"); cmd != nil || m.dialog.sending || !strings.Contains(m.View(), "a reason is required") {
		t.Errorf("enter without a reason: sending %v, want refused with a word on the reason", m.dialog.sending)
	}
	press(m, "disk full")
	if cmd := press(m, "enter"); cmd == nil || !m.dialog.sending {
		t.Fatalf("enter with a reason: want the request sent")
	}
	newer := &api.Holder{Owner: "billing/pod-2", Fingerprint: "99aa88bb77cc66dd55ee44ff3300112233445566"}
	m.Update(actionMsg{act: actRelease, key: "invoice:42", shown: shown, reason: "disk full", release: &api.ReleaseResult{Current: newer},
		err: &api.StatusError{Code: 409, Message: "owner changed, nothing released", Kind: api.ErrOwnerChanged}})
	if want := "Owner changed: invoice:42 is now held by billing/pod-2 (fingerprint 99aa88bb77cc), not billing/pod-1; nothing was released"; m.dialog != nil || m.flash.text != want {
		t.Errorf("owner changed: flash %q, want %q", m.flash.text, want)
	}

	press(m, "f")
	m.Update(holderMsg{key: "invoice:42", d: &api.LockDetail{Redis: shown}})
	press(m, "disk full", "enter")
	m.Update(actionMsg{act: actRelease, key: "invoice:42", shown: shown, reason: "disk full", release: &api.ReleaseResult{Released: true, By: "oncall-ana"}})
	if want := "Released invoice:42 (held by billing/pod-1), recorded as forced by oncall-ana: disk full"; m.flash.text != want {
		t.Errorf("released: flash %q, want %q", m.flash.text, want)
	}

	press(m, "f")
	m.Update(holderMsg{key: "invoice:42", d: &api.LockDetail{}})
	if m.dialog != nil || !strings.Contains(m.flash.text, "not held in Redis") {
		t.Errorf("f on a key Redis does not hold: dialog %v, flash %q", m.dialog, m.flash.text)
	}
	press(m, "f")
	m.Update(holderMsg{key: "invoice:42", d: &api.LockDetail{Redis: &api.Holder{Owner: "billing/pod-1"}}})
	if m.dialog != nil || !strings.Contains(m.flash.text, "did not show the holder's fingerprint") {
		t.Errorf("f without a fingerprint shown (credentials not taken): dialog %v, flash %q", m.dialog, m.flash.text)
	}
	press(m, "f")
	press(m, "esc")
	if m.dialog != nil || !strings.Contains(m.flash.text, "cancelled") {
		t.Errorf("esc: dialog %v, flash %q, want cancelled", m.dialog, m.flash.text)
	}
}

// Asking checks the grace, and an older serve without the route gets a
// clear word instead of a bare 404.
func TestAskDialog(t *testing.T) {
	m := newModel(t, Options{Operator: true})
	m.Update(snap(held("invoice:42", "billing/pod-1", 5, 3)))
	press(m, "a")
	shown := &api.Holder{Owner: "billing/pod-1", Fingerprint: "3f2a9c1b2d4e5f60718293a4b5c6d7e8f9012345"}
	m.Update(holderMsg{key: "invoice:42", d: &api.LockDetail{Redis: shown}})
	if v := m.View(); !strings.Contains(v, "Ask billing/pod-1 to release invoice:42?") || !strings.Contains(v, "Grace") {
		t.Errorf("ask confirmation:\n%s", v)
	}
	press(m, "deploy", "tab", "soon")
	if cmd := press(m, "enter"); cmd != nil || !strings.Contains(m.dialog.err, "grace must be a duration") {
		t.Errorf("grace %q: err %q, want refused", "soon", m.dialog.err)
	}
	for range 4 {
		m.Update(tea.KeyMsg{Type: tea.KeyBackspace})
	}
	press(m, "30s")
	if cmd := press(m, "enter"); cmd == nil || !m.dialog.sending {
		t.Fatalf("ask with a reason and 30s: want it sent (err %q)", m.dialog.err)
	}
	m.Update(actionMsg{act: actAsk, key: "invoice:42", shown: shown, reason: "deploy", grace: 30 * time.Second,
		err: &api.StatusError{Code: 404, Message: "no such page", Kind: api.ErrNotSupported}})
	if !strings.Contains(m.flash.text, "This serve cannot ask a holder to release") || !strings.Contains(m.flash.text, "nothing was asked") {
		t.Errorf("ask on an older serve: flash %q", m.flash.text)
	}
	press(m, "a")
	m.Update(holderMsg{key: "invoice:42", d: &api.LockDetail{Redis: shown}})
	press(m, "deploy", "enter")
	m.Update(actionMsg{act: actAsk, key: "invoice:42", shown: shown, reason: "deploy", ask: &api.AskResult{Grace: 30}})
	if want := "Asked billing/pod-1 to release invoice:42 within 30s: deploy"; m.flash.text != want {
		t.Errorf("asked: flash %q, want %q", m.flash.text, want)
	}
}

// q quits; p pauses: a tick then starts no refresh until p again.
func TestQuitAndPause(t *testing.T) {
	m := newModel(t, Options{})
	m.Update(snap())
	press(m, "p")
	if _, cmd := m.Update(tickMsg(t0)); m.fetching || cmd == nil {
		t.Errorf("tick while paused: fetching %v, want no refresh but the next tick", m.fetching)
	}
	if !strings.Contains(m.View(), "PAUSED") {
		t.Errorf("paused view does not say so")
	}
	press(m, "p")
	if !m.fetching {
		t.Errorf("resume: want a refresh at once")
	}
	cmd := press(m, "q")
	if cmd == nil {
		t.Fatal("q: no command")
	}
	if _, ok := cmd().(tea.QuitMsg); !ok {
		t.Errorf("q: command does not quit")
	}
}
