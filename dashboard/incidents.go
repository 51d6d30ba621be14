package dashboard

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
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
	DangerPil bool   // a kind that needs a look: deadlock, lease_lost, holder_expired, overlap
	Cause     string // an overlap's cause
}

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
		EndedBy: in.EndedBy, DangerPil: in.Kind == state.IncidentDeadlock || in.Kind == state.IncidentLeaseLost || in.Kind == state.IncidentHolderExpired ||
			in.Kind == state.IncidentOverlap, Cause: in.Cause}
	row.Detail, _ = keytext.Visible(overlapText(in))
	row.Detail = keytext.Cut(row.Detail, 160)
	if in.Kind == state.IncidentReleaseRequest {
		row.Detail = requestSummary(in, now) + " · " + row.Detail
	}
	for i, k := range in.Keys {
		if i == incidentKeysShown {
			row.MoreKeys = "and " + strconv.Itoa(len(in.Keys)-i) + " more"
			break
		}
		row.Keys = append(row.Keys, newKeyCell(k))
	}
	for _, o := range in.Owners {
		row.Owners = append(row.Owners, linkedOwnerCell(o))
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
	*OverlapFields
}

// OverlapFields are what an overlap's incident says beyond the others: how the
// key left its first holder (expired, vanished, forced), both leases (the
// first holder's first), what the first holder did in the window, and
// that in words ("fencing held: 3 stale writes refused").
type OverlapFields struct {
	Cause           string   `json:"cause"`
	Leases          []string `json:"leases"`
	RenewalsRefused int      `json:"renewals_refused"`
	WritesRefused   int      `json:"writes_refused"`
	Fencing         string   `json:"fencing"`
}

// overlapText is an incident's detail; of an overlap, with what the first
// holder did in the window.
func overlapText(in state.Incident) string {
	if in.Kind != state.IncidentOverlap {
		return in.Detail
	}
	s := in.Detail + "; " + state.Fencing(in.WritesRefused)
	switch n := in.RenewalsRefused; {
	case n == 1:
		s += "; 1 renewal attempt refused or failed"
	case n > 1:
		s += "; " + strconv.Itoa(n) + " renewal attempts refused or failed"
	}
	return s
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
	var ins []state.Incident
	if s.opt.Incidents != nil {
		var err error
		if ins, err = s.opt.Incidents.List(r.Context(), limit); err != nil {
			writeJSON(w, r, http.StatusServiceUnavailable, apiError{Error: "incident history: " + err.Error()})
			return
		}
	}
	// The list is written one incident at a time: a thousand records of
	// keys that JSON escapes six bytes a byte would otherwise be built
	// whole in memory for each of many concurrent readers.
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
	}
	bw := bufio.NewWriterSize(w, 32<<10)
	bw.WriteString(`{"incidents":[`)
	for i, in := range ins {
		a := apiIncident{ID: in.ID, Kind: string(in.Kind), Keys: nonNil(in.Keys), KeysB64: b64All(in.Keys),
			Owners: nonNil(in.Owners), OwnersB64: b64All(in.Owners), Start: in.Start.UTC(), End: lockjson.Time(in.End),
			EndedBy: in.EndedBy, Detail: in.Detail, Count: max(in.Count, 1)}
		if in.Kind == state.IncidentOverlap {
			a.OverlapFields = &OverlapFields{Cause: in.Cause, Leases: nonNil(in.Leases), RenewalsRefused: in.RenewalsRefused,
				WritesRefused: in.WritesRefused, Fencing: state.Fencing(in.WritesRefused)}
		}
		b, err := json.Marshal(a) // escapes HTML, as writeJSON does
		if err != nil {
			return
		}
		if i > 0 {
			bw.WriteByte(',')
		}
		if _, err := bw.Write(b); err != nil {
			return // the reader went away
		}
	}
	bw.WriteString("]}\n")
	bw.Flush()
}
