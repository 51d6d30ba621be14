package dashboard

import (
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/mux"

	"github.com/lockscope/lockscope/collector/state"
)

// routeTokenRE is a route in the first column of the reference's route
// table: `GET /keys/{key}`, or `/api/v1/locks` taking the method before it.
var routeTokenRE = regexp.MustCompile("`((GET|POST) )?(/[A-Za-z0-9_/{}.-]*)`")

// TestReferenceListsEveryRoute: docs/reference.md's route table names every
// route the dashboard serves (with its methods; HEAD goes with GET) and no
// route it does not serve.
func TestReferenceListsEveryRoute(t *testing.T) {
	s := &server{q: newSharedQuerier(state.New(state.Config{}), time.Now), opt: Options{Metrics: http.NotFoundHandler()}}
	var served []string
	err := s.routes().Walk(func(route *mux.Route, _ *mux.Router, _ []*mux.Route) error {
		path, err := route.GetPathTemplate()
		if err != nil {
			return err
		}
		methods, _ := route.GetMethods()
		for _, m := range methods {
			if m != http.MethodHead {
				served = append(served, m+" "+path)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	doc, err := os.ReadFile("../docs/reference.md")
	if err != nil {
		t.Fatal(err)
	}
	var documented []string
	table := false
	for _, line := range strings.Split(string(doc), "\n") {
		switch {
		case strings.HasPrefix(line, "| route | what |"):
			table = true
			continue
		case table && !strings.HasPrefix(line, "|"):
			table = false
		}
		if !table || strings.HasPrefix(line, "|---") {
			continue
		}
		cell, _, _ := strings.Cut(strings.TrimPrefix(line, "| "), " | ")
		method := http.MethodGet
		for _, m := range routeTokenRE.FindAllStringSubmatch(cell, -1) {
			if m[2] != "" {
				method = m[2]
			}
			documented = append(documented, method+" "+m[3])
		}
	}
	slices.Sort(served)
	served = slices.Compact(served)
	slices.Sort(documented)
	documented = slices.Compact(documented)
	if len(served) < 20 {
		t.Fatalf("the router serves %d routes, want the dashboard's many: %v", len(served), served)
	}
	for _, r := range served {
		if !slices.Contains(documented, r) {
			t.Errorf("%s is served but docs/reference.md's route table does not list it", r)
		}
	}
	for _, r := range documented {
		if !slices.Contains(served, r) {
			t.Errorf("docs/reference.md lists %s, which the dashboard does not serve", r)
		}
	}
}
