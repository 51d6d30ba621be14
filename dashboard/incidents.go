package dashboard

import (
	"encoding/base64"
	"net/http"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/internal/keytext"
	"github.com/lockscope/lockscope/internal/lockjson"
)

// The incident history, GET /incidents (incidents.templ): stuck holds,
// deadlocks, leases lost or expired, forced releases and wait queues, from
// when to when and how each ended, as every replica keeps them in Redis
// (Options.Incidents). Its JSON mirror, GET /api/v1/incidents, is at the
// end of this file.

// incidentsShown is how many incidents the page lists; the API takes
// ?limit= up to incidentsMaxLimit.
const (
	incidentsShown    = 200
	incidentsMaxLimit = 1000
	incidentKeysShown = 5 // keys a row names before "and N more"
)

// incidentsView is the incidents page's view model.
type incidentsView struct {
	Page      page
	Error     string // the history could not be read
	NoHistory bool   // no store configured
	Rows      []incidentRow
}

type incidentRow struct {
	Kind      string
	Open      bool
	Keys      []keyCell
	MoreKeys  string // "and 35 more"
	Owners    []ownerCell
	Start     string
	StartAgo  string
	End       string
	Duration  string
	EndedBy   string
	Detail    string
	Count     string // events folded, when more than one
	DangerPil bool   // a kind that needs a look: deadlock, lease_lost, holder_expired
}

type ownerCell struct{ Short, Full, Href string }

// incidentsPage is GET /incidents.
func (s *server) incidentsPage(w http.ResponseWriter, r *http.Request) {
	v := incidentsView{Page: s.page(r, "Incidents", "incidents")}
	switch {
	case s.opt.Incidents == nil:
		v.NoHistory = true
	default:
		ins, err := s.opt.Incidents.List(r.Context(), incidentsShown)
		if err != nil {
			v.Error = "The incident history could not be read from Redis: " + err.Error()
			break
		}
		now := s.now()
		for _, in := range ins {
			v.Rows = append(v.Rows, newIncidentRow(in, now))
		}
	}
	s.render(w, r, http.StatusOK, incidentsPage(v))
}

func newIncidentRow(in state.Incident, now time.Time) incidentRow {
	row := incidentRow{Kind: string(in.Kind), Open: in.Open(), Start: fmtAbs(in.Start), StartAgo: fmtAgo(now, in.Start),
		EndedBy: in.EndedBy, DangerPil: in.Kind == state.IncidentDeadlock || in.Kind == state.IncidentLeaseLost || in.Kind == state.IncidentHolderExpired}
	row.Detail, _ = keytext.Visible(in.Detail)
	row.Detail = keytext.Cut(row.Detail, 160)
	for i, k := range in.Keys {
		if i == incidentKeysShown {
			row.MoreKeys = "and " + strconv.Itoa(len(in.Keys)-i) + " more"
			break
		}
		row.Keys = append(row.Keys, newKeyCell(k))
	}
	for _, o := range in.Owners {
		short, full := ownerText(o)
		row.Owners = append(row.Owners, ownerCell{Short: short, Full: full, Href: ownerPath(o)})
	}
	if in.Open() {
		row.Duration = fmtDuration(max(now.Sub(in.Start), 0).Truncate(time.Second)) + " so far"
	} else {
		row.End = fmtAbs(in.End)
		row.Duration = fmtDuration(max(in.End.Sub(in.Start), 0).Truncate(time.Millisecond))
	}
	if in.Count > 1 {
		row.Count = strconv.Itoa(in.Count)
	}
	return row
}

// apiIncident is one incident as GET /api/v1/incidents lists it. Keys and
// owners are arbitrary bytes: keys_b64 and owners_b64 carry them all,
// base64-encoded, when one of them is not valid UTF-8.
type apiIncident struct {
	ID        string     `json:"id"`
	Kind      string     `json:"kind"`
	Keys      []string   `json:"keys"`
	KeysB64   []string   `json:"keys_b64,omitempty"`
	Owners    []string   `json:"owners"`
	OwnersB64 []string   `json:"owners_b64,omitempty"`
	Start     time.Time  `json:"start"`
	End       *time.Time `json:"end"` // null while open
	EndedBy   string     `json:"ended_by"`
	Detail    string     `json:"detail,omitempty"`
	Count     int        `json:"count"`
}

type apiIncidents struct {
	Incidents []apiIncident `json:"incidents"`
}

// b64All returns every string of ss base64-encoded when one of them is not
// valid UTF-8 (JSON would mangle it), else nil.
func b64All(ss []string) []string {
	if !slices.ContainsFunc(ss, func(s string) bool { return !utf8.ValidString(s) }) {
		return nil
	}
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = base64.StdEncoding.EncodeToString([]byte(s))
	}
	return out
}

// apiIncidentsList is GET /api/v1/incidents?limit=100: the history, the
// most recently started first.
func (s *server) apiIncidentsList(w http.ResponseWriter, r *http.Request) {
	limit, ok := atoiDefault(r.URL.Query().Get("limit"), 100, 1, incidentsMaxLimit)
	if !ok {
		writeJSON(w, r, http.StatusBadRequest, apiError{Error: "limit must be 1.." + strconv.Itoa(incidentsMaxLimit)})
		return
	}
	v := apiIncidents{Incidents: []apiIncident{}}
	if s.opt.Incidents != nil {
		ins, err := s.opt.Incidents.List(r.Context(), limit)
		if err != nil {
			writeJSON(w, r, http.StatusServiceUnavailable, apiError{Error: "incident history: " + err.Error()})
			return
		}
		for _, in := range ins {
			a := apiIncident{ID: in.ID, Kind: string(in.Kind), Keys: nonNil(in.Keys), KeysB64: b64All(in.Keys),
				Owners: nonNil(in.Owners), OwnersB64: b64All(in.Owners), Start: in.Start.UTC(), End: lockjson.Time(in.End),
				EndedBy: in.EndedBy, Detail: in.Detail, Count: max(in.Count, 1)}
			v.Incidents = append(v.Incidents, a)
		}
	}
	writeJSON(w, r, http.StatusOK, v)
}
