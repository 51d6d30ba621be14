package dashboard

import (
	"errors"
	"net/url"
	"strings"

	"github.com/lockscope/lockscope/event"
)

// Trace links: the trace ids the collector keeps (of a hold, a waiter, a
// recent event) are shown on the key page and on /blocking, as links into
// the operator's tracing backend when Options.TraceURL is set, as text
// otherwise.

// traceIDVar is what Options.TraceURL must contain: the place of the trace
// id, 32 lower-case hex digits.
const traceIDVar = "{trace_id}"

// CheckTraceURL reports whether u can be Options.TraceURL: an absolute http
// or https URL with {trace_id} in it.
func CheckTraceURL(u string) error {
	if !strings.Contains(u, traceIDVar) {
		return errors.New("trace URL must contain {trace_id}, where the trace id goes (https://tempo.example.com/trace/{trace_id})")
	}
	// {trace_id} itself is not valid in every part of a URL: check the
	// URL with an id in its place.
	p, err := url.Parse(strings.ReplaceAll(u, traceIDVar, "0af7651916cd43dd8448eb211c80319c"))
	switch {
	case err != nil:
		return errors.New("trace URL: " + err.Error())
	case p.Scheme != "http" && p.Scheme != "https":
		return errors.New("trace URL must be http:// or https://")
	case p.Host == "":
		return errors.New("trace URL has no host")
	}
	return nil
}

// traceRef is a trace id as a page shows it.
type traceRef struct {
	ID   string // 32 hex digits
	Href string // "" without Options.TraceURL
}

// Short is the id's first 8 digits: enough to tell traces apart on a page.
func (t traceRef) Short() string { return t.ID[:8] }

// traceRef returns tr as shown, nil for none.
func (s *server) traceRef(tr event.TraceID) *traceRef {
	if !tr.IsValid() {
		return nil
	}
	t := &traceRef{ID: tr.String()}
	if s.opt.TraceURL != "" {
		t.Href = strings.ReplaceAll(s.opt.TraceURL, traceIDVar, t.ID)
	}
	return t
}
