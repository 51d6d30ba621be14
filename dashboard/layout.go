package dashboard

import (
	"net/http"
	"time"

	"github.com/a-h/templ"

	"github.com/lockscope/lockscope/internal/keytext"
)

// What every page shares, beside layout.templ: the page frame (title, nav,
// banners), key and owner cells, and rendering. Each page's own view model
// and handler are in the file named after its .templ.

// page is what every page shares.
type page struct {
	Title    string
	Nav      string // "overview", "keys" or "" (highlights the nav link)
	Nonce    string
	ReadOnly bool   // releases disabled by configuration
	Operator string // the signed-in operator, "" if anonymous
	Ingest   string // why the collector is not ingesting, "" when healthy
	Live     bool   // the page refreshes itself (not forms)
	Clock    string // when the page was rendered
	// Deadlocks are the wait-for cycles now, shown as a banner on every page.
	Deadlocks []deadlockView
}

// deadlockView is one cycle: each member holds one key and waits for the next.
type deadlockView struct {
	Members []deadlockMember
	Since   string
}

type deadlockMember struct {
	Owner       ownerCell
	Holds       keyCell
	WaitsFor    keyCell
	ReleaseHref string // forced release of the key it holds; "" when read-only
}

func (s *server) page(r *http.Request, title, nav string) page {
	p := page{
		Title:    title,
		Nav:      nav,
		Nonce:    nonceFrom(r.Context()),
		ReadOnly: s.readOnly(),
		Operator: operatorFrom(r.Context()),
		Live:     true,
		Clock:    s.now().Format("15:04:05"),
	}
	if err := s.q.Health(); err != nil {
		p.Ingest = err.Error()
	}
	for _, c := range s.q.Deadlocks() {
		var d deadlockView
		var since time.Time
		for _, m := range c.Members {
			dm := deadlockMember{Holds: newKeyCell(m.Holds), WaitsFor: newKeyCell(m.WaitsFor)}
			dm.Owner = newOwnerCell(m.Owner)
			if !p.ReadOnly {
				dm.ReleaseHref = releasePath(m.Holds)
			}
			d.Members = append(d.Members, dm)
			if since.IsZero() || m.Since.After(since) {
				since = m.Since // the cycle closed when its last member began to wait
			}
		}
		d.Since = fmtAgo(s.now(), since)
		p.Deadlocks = append(p.Deadlocks, d)
	}
	return p
}

// keyCell is how a key shows in tables: cut for the cell, full on hover.
type keyCell struct {
	Href    string
	Text    string // display form, shortened
	Full    string // display form, complete
	Escaped bool   // the display form escapes control or invalid bytes
}

const keyCellMax = 80

func newKeyCell(key string) keyCell {
	disp, esc := keytext.Visible(key)
	return keyCell{Href: keyPath(key), Text: keytext.Cut(disp, keyCellMax), Full: disp, Escaped: esc}
}

// classText shows a class name, which is derived from raw keys and so may
// hold any byte, the way keys are shown.
func classText(class string) string {
	disp, _ := keytext.Visible(class)
	return keytext.Cut(disp, 120)
}

// ownerCell is an owner as a table cell or a card shows it: Short (cut to
// 48 characters) on screen, Full (control bytes made visible, as
// keytext.Visible writes them) in the title, and Href, when it is a link,
// the owner's page. The zero value is "no owner" (a dash).
type ownerCell struct{ Short, Full, Href string }

// newOwnerCell is owner as text; set Href to make it a link.
func newOwnerCell(owner string) ownerCell {
	full, _ := keytext.Visible(owner)
	return ownerCell{Short: keytext.Cut(full, 48), Full: full}
}

// linkedOwnerCell is owner as a link to its page.
func linkedOwnerCell(owner string) ownerCell {
	c := newOwnerCell(owner)
	c.Href = ownerPath(owner)
	return c
}

// tab is a link that selects a view (window, ranking, sort).
type tab struct {
	Label  string
	Href   string
	Active bool
}

type footerItem struct{ Label, Value string }

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

type errorView struct {
	Page    page
	Status  int
	Message string
}

// render writes a component with status; a render error after the header
// is out can only be logged.
func (s *server) render(w http.ResponseWriter, r *http.Request, status int, c templ.Component) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	if r.Method == http.MethodHead {
		return
	}
	if err := c.Render(r.Context(), w); err != nil {
		s.log.Error("dashboard: render", "path", r.URL.Path, "err", err)
	}
}

// fail answers an error as a page or as JSON.
func (s *server) fail(w http.ResponseWriter, r *http.Request, api bool, status int, msg string) {
	if api {
		writeJSON(w, r, status, apiError{Error: msg})
		return
	}
	p := s.page(r, statusText(status), "")
	p.Live = false
	s.render(w, r, status, errorPage(errorView{Page: p, Status: status, Message: msg}))
}

func statusText(code int) string { return http.StatusText(code) }
