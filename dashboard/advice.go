package dashboard

import (
	"net/http"
	"time"

	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/internal/keytext"
)

// The advice, GET /api/v1/advice: what to change, class by class, from the
// figures of one window (state.Advise; its rules and thresholds are in
// docs/operating.md). The class page shows each class's, the classes page a badge
// per advice, the overview their count; 'lockscope advise' prints this.

// apiAdviceItem is one advice in the JSON API.
type apiAdviceItem struct {
	Class      string             `json:"class"`
	ClassB64   string             `json:"class_b64,omitempty"`
	Kind       string             `json:"kind"`
	Severity   string             `json:"severity"` // warning or info
	Summary    string             `json:"summary"`
	Evidence   []string           `json:"evidence"` // the figures it rests on, each with its threshold
	Suggestion string             `json:"suggestion"`
	Figures    map[string]float64 `json:"figures"` // the evidence's figures by name: seconds, shares 0..1, counts
	Href       string             `json:"href"`    // the class page, at this advice
}

type apiAdvice struct {
	Window        string          `json:"window"`
	WindowSeconds float64         `json:"window_seconds"`
	Classes       int             `json:"classes"` // judged
	Advice        []apiAdviceItem `json:"advice"`
	// WaitsUnknown are the classes whose acquisitions were all watched
	// locks': wait_budget_short and single_key_bottleneck cannot judge them.
	WaitsUnknown []string `json:"waits_unknown"`
}

// apiAdvice is GET /api/v1/advice?window=5m&class=CLASS.
func (s *server) apiAdvice(w http.ResponseWriter, r *http.Request) {
	qs := r.URL.Query()
	window, ok := parseWindow(qs.Get("window"))
	if !ok {
		writeJSON(w, r, http.StatusBadRequest, apiError{Error: "window must be one of 1m, 5m, 1h"})
		return
	}
	only, filter := qs.Get("class"), qs.Has("class")
	v := apiAdvice{Window: windowLabel(window), WindowSeconds: seconds(window), Advice: []apiAdviceItem{}, WaitsUnknown: []string{}}
	var classes []state.ClassStats
	for _, c := range s.q.ClassStats(window) {
		if filter && c.Class != only {
			continue
		}
		classes = append(classes, c)
		if !c.WaitsKnown {
			v.WaitsUnknown = append(v.WaitsUnknown, c.Class)
		}
	}
	v.Classes = len(classes)
	for _, a := range state.Advise(classes) {
		v.Advice = append(v.Advice, apiAdviceItem{Class: a.Class, ClassB64: keytext.B64IfInvalid(a.Class), Kind: string(a.Kind),
			Severity: a.Severity, Summary: a.Summary, Evidence: a.Evidence, Suggestion: a.Suggestion, Figures: a.Figures,
			Href: classPath(a.Class) + "#advice-" + string(a.Kind)})
	}
	writeJSON(w, r, http.StatusOK, v)
}

// adviceTile is the overview's count of the advice of the last 5 minutes,
// linking to the classes that have some.
func (s *server) adviceTile() statTile {
	adv := state.Advise(s.q.ClassStats(5 * time.Minute))
	warnings := 0
	classes := map[string]bool{}
	for _, a := range adv {
		classes[a.Class] = true
		if a.Severity == state.SeverityWarning {
			warnings++
		}
	}
	t := statTile{ID: "advice", Label: "Advice", Value: fmtCount(len(adv)), Note: "nothing to change · 5 min",
		Href: "/classes?advice=1", Tone: toneIf(warnings > 0, "warn")}
	if len(adv) > 0 {
		t.Note = fmtCount(warnings) + " warnings for " + fmtCount(len(classes)) + " classes: what to change · 5 min"
	}
	return t
}
