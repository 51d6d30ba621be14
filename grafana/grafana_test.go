// Package grafana holds no Go code: its tests check the Grafana provisioning
// files and dashboards next to them.
package grafana

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/lockscope/lockscope/test/promqltest"
)

const (
	datasourceUID = "lockscope-prometheus"
	dashboardsDir = "/var/lib/grafana/dashboards" // where docker-compose mounts dashboards/
	keyLink       = "${lockscope_url}/keys/${__data.fields.key:percentencode}"
)

// dashboard is the part of a Grafana dashboard JSON these checks read.
type dashboard struct {
	UID           string  `json:"uid"`
	Editable      bool    `json:"editable"`
	Title         string  `json:"title"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []variable `json:"list"`
	} `json:"templating"`
	Links []struct {
		URL string `json:"url"`
	} `json:"links"`
	Annotations struct {
		List []annotation `json:"list"`
	} `json:"annotations"`
}

// annotation is a dashboard annotation query.
type annotation struct {
	Name        string      `json:"name"`
	Datasource  *datasource `json:"datasource"`
	Expr        string      `json:"expr"`
	Enable      bool        `json:"enable"`
	TitleFormat string      `json:"titleFormat"`
}

type panel struct {
	ID          int                       `json:"id"`
	Type        string                    `json:"type"`
	Title       string                    `json:"title"`
	Description string                    `json:"description"`
	Datasource  *datasource               `json:"datasource"`
	GridPos     *struct{ H, W, X, Y int } `json:"gridPos"`
	Targets     []target                  `json:"targets"`
	Panels      []panel                   `json:"panels"` // collapsed rows
	Links       []struct {
		Title string `json:"title"`
		URL   string `json:"url"`
	} `json:"links"`
	FieldConfig struct {
		Defaults struct {
			Unit     string          `json:"unit"`
			Mappings json.RawMessage `json:"mappings"`
		} `json:"defaults"`
		Overrides []struct {
			Matcher struct {
				ID      string `json:"id"`
				Options string `json:"options"`
			} `json:"matcher"`
			Properties []struct {
				ID    string          `json:"id"`
				Value json.RawMessage `json:"value"`
			} `json:"properties"`
		} `json:"overrides"`
	} `json:"fieldConfig"`
}

type target struct {
	RefID      string      `json:"refId"`
	Expr       string      `json:"expr"`
	Datasource *datasource `json:"datasource"`
	Exemplar   bool        `json:"exemplar"`
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type variable struct {
	Name       string          `json:"name"`
	Label      string          `json:"label"`
	Type       string          `json:"type"`
	Query      json.RawMessage `json:"query"`
	Definition string          `json:"definition"`
	Datasource *datasource     `json:"datasource"`
	Multi      bool            `json:"multi"`
	IncludeAll bool            `json:"includeAll"`
	AllValue   string          `json:"allValue"`
	Refresh    int             `json:"refresh"`
	Current    struct {
		Value json.RawMessage `json:"value"`
	} `json:"current"`
}

func (d dashboard) variable(name string) (variable, bool) {
	for _, v := range d.Templating.List {
		if v.Name == name {
			return v, true
		}
	}
	return variable{}, false
}

// allPanels returns the panels of d, rows' nested panels included.
func (d dashboard) allPanels() []panel {
	var out []panel
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			out = append(out, p)
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

type loaded struct {
	path string
	dashboard
}

func loadDashboards(t *testing.T) []loaded {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("dashboards", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("Glob(dashboards/*.json) = %v, %v, want dashboards", files, err)
	}
	var out []loaded
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var d dashboard
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatalf("%s is not valid dashboard JSON: %v", f, err)
		}
		out = append(out, loaded{f, d})
	}
	return out
}

func TestDashboardsStructure(t *testing.T) {
	uids := map[string]string{}
	for _, d := range loadDashboards(t) {
		if d.UID == "" || len(d.UID) > 40 {
			t.Errorf("%s: uid %q, want 1 to 40 characters", d.path, d.UID)
		}
		if prev, dup := uids[d.UID]; dup {
			t.Errorf("%s: uid %q already used by %s", d.path, d.UID, prev)
		}
		uids[d.UID] = d.path
		if d.Title == "" {
			t.Errorf("%s: no title", d.path)
		}
		if d.SchemaVersion < 39 {
			t.Errorf("%s: schemaVersion %d, want >= 39 (Grafana 10.4+)", d.path, d.SchemaVersion)
		}
		ids := map[int]string{}
		for _, p := range d.allPanels() {
			if p.ID <= 0 {
				t.Errorf("%s: panel %q id %d, want a positive id", d.path, p.Title, p.ID)
			}
			if prev, dup := ids[p.ID]; dup {
				t.Errorf("%s: panel id %d used by %q and %q", d.path, p.ID, prev, p.Title)
			}
			ids[p.ID] = p.Title
			if p.GridPos == nil || p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X+p.GridPos.W > 24 {
				t.Errorf("%s: panel %q gridPos %+v, want a place within the 24 columns", d.path, p.Title, p.GridPos)
			}
			if p.Type != "row" && p.Title == "" {
				t.Errorf("%s: panel %d has no title", d.path, p.ID)
			}
			if p.Type != "row" && len(p.Targets) == 0 {
				t.Errorf("%s: panel %q has no query", d.path, p.Title)
			}
			for _, tg := range p.Targets {
				for _, ds := range []*datasource{p.Datasource, tg.Datasource} {
					if ds == nil || ds.Type != "prometheus" || (ds.UID != "${datasource}" && ds.UID != datasourceUID) {
						t.Errorf("%s: panel %q query %s datasource %+v, want prometheus ${datasource}", d.path, p.Title, tg.RefID, ds)
					}
				}
				if strings.TrimSpace(tg.Expr) == "" {
					t.Errorf("%s: panel %q query %s is empty", d.path, p.Title, tg.RefID)
				}
			}
		}
	}
}

// TestDashboardVariables checks the variables every query and link builds
// on: the data source (defaulting to the provisioned one), the lock class
// and the lockscope URL.
func TestDashboardVariables(t *testing.T) {
	for _, d := range loadDashboards(t) {
		ds, ok := d.variable("datasource")
		if !ok || ds.Type != "datasource" || string(ds.Query) != `"prometheus"` {
			t.Errorf("%s: datasource variable %+v, want type datasource, query prometheus", d.path, ds)
		}
		if got := string(ds.Current.Value); got != `"`+datasourceUID+`"` {
			t.Errorf("%s: datasource variable default %s, want %q", d.path, got, datasourceUID)
		}
		class, ok := d.variable("class")
		if !ok || class.Type != "query" || class.Definition != "label_values(lockscope_acquisitions_total, class)" {
			t.Errorf("%s: class variable %+v, want a query of label_values(lockscope_acquisitions_total, class)", d.path, class)
		}
		// Multi-value and All make Grafana regex-escape the value: class
		// names contain '*'.
		if !class.Multi || !class.IncludeAll {
			t.Errorf("%s: class variable multi %v includeAll %v, want both", d.path, class.Multi, class.IncludeAll)
		}
		u, ok := d.variable("lockscope_url")
		if !ok || u.Type != "textbox" || string(u.Query) != `"http://localhost:8080"` {
			t.Errorf("%s: lockscope_url variable %+v, want a textbox defaulting to http://localhost:8080", d.path, u)
		}
	}
}

// classMetric matches a selector of a metric with a class label, and
// whatever label matchers follow it.
var classMetric = regexp.MustCompile(`(lockscope_(?:acquisitions_total|contentions_total|acquire_failures_total|wait_seconds_bucket|hold_seconds_bucket|releases_total|expirations_total|renewal_failures_total|forced_releases_total|handoffs_total|held_locks|waiters|stuck_locks|oldest_hold_start_timestamp_seconds|hot_key_contentions))\b(\{[^}]*\})?`)

func TestDashboardQueriesFollowClassVariable(t *testing.T) {
	for _, d := range loadDashboards(t) {
		for _, p := range d.allPanels() {
			for _, tg := range p.Targets {
				for _, m := range classMetric.FindAllStringSubmatch(tg.Expr, -1) {
					if !strings.Contains(m[2], `class=~"$class"`) {
						t.Errorf("%s: panel %q selects %s without class=~\"$class\"", d.path, p.Title, m[0])
					}
				}
			}
		}
	}
}

// TestExemplarsOnWaitAndHold checks that Grafana asks for the exemplars
// of the wait and hold histograms (each traced call's trace_id, see
// collector/promexport) on their p99 queries, once per panel, and nowhere
// else: an exemplar query on another metric finds none, and one on both of
// a panel's quantiles draws every dot twice.
func TestExemplarsOnWaitAndHold(t *testing.T) {
	want := map[string]bool{"lockscope_wait_seconds_bucket": false, "lockscope_hold_seconds_bucket": false}
	for _, d := range loadDashboards(t) {
		for _, p := range d.allPanels() {
			for _, tg := range p.Targets {
				if !tg.Exemplar {
					continue
				}
				metric := ""
				for m := range want {
					if strings.Contains(tg.Expr, m+"{") && strings.HasPrefix(tg.Expr, "histogram_quantile(0.99,") {
						metric = m
					}
				}
				switch {
				case metric == "":
					t.Errorf("%s: panel %q asks for exemplars of %q, want them only on the wait and hold p99", d.path, p.Title, tg.Expr)
				case want[metric]:
					t.Errorf("%s: exemplars of %s asked for twice (panel %q)", d.path, metric, p.Title)
				default:
					want[metric] = true
				}
			}
		}
	}
	for m, found := range want {
		if !found {
			t.Errorf("no panel shows the exemplars of %s", m)
		}
	}
}

// TestHotKeysLinkToLockscope checks that a panel showing hot keys links each
// key to its page on the lockscope dashboard, percent-encoded (keys are
// arbitrary bytes and may contain '/', '?' or '%').
func TestHotKeysLinkToLockscope(t *testing.T) {
	found := false
	for _, d := range loadDashboards(t) {
		for _, p := range d.allPanels() {
			if len(p.Targets) == 0 || !strings.Contains(p.Targets[0].Expr, "lockscope_hot_key_contentions") {
				continue
			}
			found = true
			var urls []string
			for _, o := range p.FieldConfig.Overrides {
				if o.Matcher.ID != "byName" || o.Matcher.Options != "key" {
					continue
				}
				for _, prop := range o.Properties {
					var links []struct{ URL string }
					if prop.ID == "links" && json.Unmarshal(prop.Value, &links) == nil {
						for _, l := range links {
							urls = append(urls, l.URL)
						}
					}
				}
			}
			if len(urls) != 1 || urls[0] != keyLink {
				t.Errorf("%s: panel %q key links %q, want [%q]", d.path, p.Title, urls, keyLink)
			}
		}
	}
	if !found {
		t.Error("no dashboard panel queries lockscope_hot_key_contentions")
	}
}

// grafanaVars are valid values for Grafana's variables, so that dashboard
// queries become plain PromQL. The class value is what Grafana sends for a
// multi-value selection (regex-escaped).
var grafanaVars = strings.NewReplacer(
	"$__rate_interval", "1m",
	"$__interval", "1m",
	"$__range", "1h",
	"$class", `(workflow:\\*|job:\\*)`,
	"$job", ".+", // the allValue of All
	"$instance", ".+",
)

func dashboardExprs(t *testing.T) []promqltest.Expr {
	t.Helper()
	var exprs []promqltest.Expr
	for _, d := range loadDashboards(t) {
		for _, p := range d.allPanels() {
			for _, tg := range p.Targets {
				e := grafanaVars.Replace(tg.Expr)
				if strings.Contains(e, "$") {
					t.Errorf("%s: panel %q query %s uses an unknown variable: %q", d.path, p.Title, tg.RefID, tg.Expr)
				}
				exprs = append(exprs, promqltest.Expr{Where: d.path + ": panel " + p.Title + " query " + tg.RefID, Expr: e})
			}
		}
		for _, a := range d.Annotations.List {
			if a.Expr == "" {
				continue
			}
			e := grafanaVars.Replace(a.Expr)
			if strings.Contains(e, "$") {
				t.Errorf("%s: annotation %q uses an unknown variable: %q", d.path, a.Name, a.Expr)
			}
			exprs = append(exprs, promqltest.Expr{Where: d.path + ": annotation " + a.Name, Expr: e})
		}
	}
	return exprs
}

// TestIncidentAnnotations: the overview marks incidents on its graphs, from
// the Prometheus datasource the provisioning ships (lockscope_incidents_total
// by kind, deduplicated across replicas).
func TestIncidentAnnotations(t *testing.T) {
	for _, d := range loadDashboards(t) {
		var found bool
		for _, a := range d.Annotations.List {
			if !strings.Contains(a.Expr, "lockscope_incidents_total") {
				continue
			}
			found = true
			if a.Datasource == nil || a.Datasource.Type != "prometheus" || a.Datasource.UID != "${datasource}" || !a.Enable {
				t.Errorf("%s: annotation %q datasource %+v enabled %v, want the ${datasource} Prometheus variable, enabled", d.path, a.Name, a.Datasource, a.Enable)
			}
			if !strings.Contains(a.Expr, "max without (instance, pod)") || !strings.Contains(a.TitleFormat, "{{kind}}") {
				t.Errorf("%s: annotation %q = %q titled %q, want replicas deduplicated and the kind in the title", d.path, a.Name, a.Expr, a.TitleFormat)
			}
		}
		if !found {
			t.Errorf("%s: no annotation from lockscope_incidents_total", d.path)
		}
	}
}

func TestDashboardQueriesParse(t *testing.T) {
	promqltest.CheckParse(t, dashboardExprs(t))
}

func TestDashboardMetricsAreExported(t *testing.T) {
	promqltest.CheckExported(t, dashboardExprs(t), promqltest.Exported(t), nil)
}

func TestProvisioning(t *testing.T) {
	var ds struct {
		APIVersion  int `yaml:"apiVersion"`
		Datasources []struct {
			Name, UID, Type, URL, Access string
			IsDefault                    bool `yaml:"isDefault"`
		} `yaml:"datasources"`
	}
	redistest.ReadYAML(t, filepath.Join("provisioning", "datasources", "prometheus.yml"), &ds)
	if ds.APIVersion != 1 || len(ds.Datasources) != 1 {
		t.Fatalf("datasources provisioning = %+v, want apiVersion 1 and one datasource", ds)
	}
	got := ds.Datasources[0]
	if got.UID != datasourceUID || got.Type != "prometheus" || got.URL != "http://prometheus:9090" || got.Access != "proxy" || !got.IsDefault {
		t.Errorf("datasource = %+v, want default prometheus uid %s at http://prometheus:9090 via proxy", got, datasourceUID)
	}

	var prov struct {
		APIVersion int `yaml:"apiVersion"`
		Providers  []struct {
			Name, Type string
			Options    struct{ Path string } `yaml:"options"`
		} `yaml:"providers"`
	}
	redistest.ReadYAML(t, filepath.Join("provisioning", "dashboards", "lockscope.yml"), &prov)
	if prov.APIVersion != 1 || len(prov.Providers) != 1 || prov.Providers[0].Type != "file" || prov.Providers[0].Options.Path != dashboardsDir {
		t.Errorf("dashboards provisioning = %+v, want one file provider reading %s", prov, dashboardsDir)
	}
}

// TestComposeMountsProvisioning checks the paths the provisioning files
// assume against the Grafana service of docker-compose.yml.
func TestComposeMountsProvisioning(t *testing.T) {
	var compose struct {
		Services map[string]struct {
			Volumes []string `yaml:"volumes"`
		} `yaml:"services"`
	}
	redistest.ReadYAML(t, filepath.Join("..", "docker-compose.yml"), &compose)
	g, ok := compose.Services["grafana"]
	if !ok {
		t.Fatal("docker-compose.yml has no grafana service")
	}
	mounts := map[string]string{}
	for _, v := range g.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) >= 2 {
			mounts[filepath.Clean(parts[0])] = parts[1]
		}
	}
	for src, want := range map[string]string{"grafana/provisioning": "/etc/grafana/provisioning", "grafana/dashboards": dashboardsDir} {
		if got := mounts[src]; got != want {
			t.Errorf("docker-compose.yml grafana mounts ./%s at %q, want %q", src, got, want)
		}
	}
}
