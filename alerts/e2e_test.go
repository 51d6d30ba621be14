package alerts

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/collector"
	"github.com/lockscope/lockscope/collector/promexport"
	"github.com/lockscope/lockscope/collector/state"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/lockscope/lockscope/lock"
	"github.com/lockscope/lockscope/test/promqltest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// Test thresholds. The rules are the shipped ones with every "for:" cut to
// testFor; the stuck threshold lives in the collector, so the test's
// aggregator gets stuckAfter. Everything else (windows, thresholds) is as
// shipped: the normal workload must stay under them for real.
const (
	testFor    = "1s"
	stuckAfter = 2 * time.Second
)

// TestPrometheusEndToEnd runs the real chain: lock library and emitter write
// to a real Redis stream, two collector replicas read it, each registry is
// served on /metrics, and Debian's prometheus scrapes both every second and
// evaluates the rules (which must count every lock once, not once per
// replica). A normal contended workload keeps every Lock* alert quiet; a
// holder that hangs while its lease auto-renews makes LockStuck fire.
func TestPrometheusEndToEnd(t *testing.T) {
	t.Parallel() // mostly waits on scrapes and evaluations
	srv := redistest.Shared(t)
	rdb := srv.Client(t)
	prefix := redistest.KeyPrefix(t)
	stream := prefix + "events"

	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)

	// lockscope: two replicas, each a collector + /metrics, both scraped:
	// every rule must count each lock once.
	targets, aggs := startReplicas(ctx, t, rdb, stream, state.Config{StuckAfter: stuckAfter}, "e2e-a", "e2e-b")
	agg := aggs[0]
	prom := startPrometheus(t, targets...)
	em := startEmitter(t, rdb, stream)

	// Phase 1: four workers contend for four keys with short holds.
	workCtx, stopWork := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var workErr error
	var errOnce sync.Once
	for w := range 4 {
		c := lock.New(rdb, &lock.Options{Owner: "e2e/worker/" + strconv.Itoa(w), Recorder: em})
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; workCtx.Err() == nil; i++ {
				key := prefix + "order:" + strconv.Itoa((i+w)%4)
				octx, ocancel := context.WithTimeout(workCtx, 5*time.Second)
				err := c.Do(octx, key, 3*time.Second, &lock.ObtainOptions{Retry: lock.LinearBackoff(5 * time.Millisecond)},
					func(context.Context) error { time.Sleep(5 * time.Millisecond); return nil })
				ocancel()
				if err != nil && workCtx.Err() == nil {
					errOnce.Do(func() { workErr = fmt.Errorf("Do(%q) = %v", key, err) })
				}
			}
		}()
	}
	stopWorkers := func() {
		stopWork()
		wg.Wait()
		if workErr != nil {
			t.Errorf("normal workload: %v, want every obtain to succeed", workErr)
		}
	}
	t.Cleanup(stopWorkers)

	// Quiet until Prometheus has scraped the workload's contention and
	// evaluated every rule on it several times.
	// within bounds a wait on Prometheus: a minute, which a loaded host
	// needs for a few scrapes and evaluations; how long each took is logged.
	within := func(d time.Duration) context.Context {
		c, cancel := context.WithTimeout(ctx, d)
		t.Cleanup(cancel)
		return c
	}
	start := time.Now()
	var evaluatedAt time.Time
	if !redistest.Poll(within(time.Minute), func() bool {
		for _, a := range prom.alerts(t, "Lock") {
			if isLockAlert(a.Labels["alertname"]) {
				t.Fatalf("normal workload: alert %v is %s, want every Lock* alert quiet", a.Labels, a.State)
			}
		}
		if evaluatedAt.IsZero() &&
			prom.value(t, `sum(lockscope_acquisitions_total)`) > 50 &&
			prom.value(t, `sum(lockscope_contentions_total)`) > 0 &&
			prom.value(t, `sum(lockscope_handoffs_total)`) > 0 {
			evaluatedAt = time.Now()
		}
		return !evaluatedAt.IsZero() && prom.rulesEvaluatedAfter(t, evaluatedAt.Add(3*time.Second))
	}) {
		t.Fatalf("normal workload: after %v Prometheus has acquisitions %v, contentions %v, handoffs %v; want > 50, > 0, > 0 and rules evaluated\n%s",
			time.Since(start), prom.value(t, `sum(lockscope_acquisitions_total)`), prom.value(t, `sum(lockscope_contentions_total)`),
			prom.value(t, `sum(lockscope_handoffs_total)`), prom.logs())
	}
	stopWorkers()
	t.Logf("normal workload: quiet for %v of scrapes and evaluations", time.Since(start).Round(time.Millisecond))

	// Phase 2: a holder hangs while its lease keeps renewing.
	hung := lock.New(rdb, &lock.Options{Owner: "e2e/hung", Recorder: em})
	stuckKey := prefix + "report:7"
	// A TTL comfortably longer than a renewal round trip under -race: the
	// lease must stay held, only its hold time matters.
	lease, err := hung.Obtain(ctx, stuckKey, 3*time.Second, &lock.ObtainOptions{AutoRenew: true})
	if err != nil {
		t.Fatalf("Obtain(%q) = %v, want a lease", stuckKey, err)
	}
	t.Cleanup(func() { lease.Release(context.Background()) })
	held := time.Now()

	var class string
	if !redistest.Poll(within(time.Minute), func() bool {
		if d, ok := agg.Lock(stuckKey); ok && class == "" {
			class = d.Class
		}
		var got []alert
		for _, a := range prom.alerts(t, "LockStuck") {
			if a.State == "firing" {
				got = append(got, a)
			}
		}
		if len(got) > 0 {
			a := got[0]
			if len(got) != 1 || a.Labels["class"] != class || a.Labels["severity"] != "critical" {
				t.Fatalf("firing LockStuck alerts = %+v, want one for class %q with severity critical", got, class)
			}
			wantDesc := "1 lock(s) of class " + class + " have been held past the stuck threshold"
			if !strings.HasPrefix(a.Annotations["description"], wantDesc) {
				t.Errorf("LockStuck description = %q, want it to start with %q", a.Annotations["description"], wantDesc)
			}
			if a.Annotations["runbook_url"] != runbookBase+"lockstuck" {
				t.Errorf("LockStuck runbook_url = %q, want %q", a.Annotations["runbook_url"], runbookBase+"lockstuck")
			}
			t.Logf("LockStuck firing %v after the hung holder obtained %q (stuck threshold %v, for %s)",
				time.Since(held).Round(time.Millisecond), stuckKey, stuckAfter, testFor)
			return true
		}
		return false
	}) {
		t.Fatalf("LockStuck not firing %v after a hung holder obtained %q; stuck_locks in Prometheus = %v, alerts %+v\n%s",
			time.Since(held), stuckKey, prom.value(t, `sum(lockscope_stuck_locks)`), prom.alerts(t, ""), prom.logs())
	}
	select {
	case <-lease.Done():
		t.Fatalf("hung holder's lease ended (%v), want it still renewing", lease.Err())
	default:
	}
	for _, a := range prom.alerts(t, "Lock") {
		if n := a.Labels["alertname"]; n != "LockStuck" && isLockAlert(n) {
			t.Errorf("alert %v is %s while only LockStuck should be", a.Labels, a.State)
		}
	}

	// The Grafana panels, queried as Grafana does with All selected, count
	// each lock once while two replicas are scraped: every query gives the
	// figure it gives for one replica alone.
	checkDashboardWithTwoReplicas(t, prom, targets)

	// Phase 3: two services deadlock (A holds x and waits for y, B the
	// reverse, nested Do): LockDeadlock fires, once, while it lasts. The
	// waits last until the alert fired (or a minute): a loaded host sees
	// it late, never misses it.
	deadlocked, endDeadlock := context.WithCancel(ctx)
	both := make(chan struct{})
	var ready, done sync.WaitGroup
	ready.Add(2)
	x, y := prefix+"ledger:1", prefix+"account:1"
	for _, p := range [][3]string{{"e2e/service-a", x, y}, {"e2e/service-b", y, x}} {
		done.Go(func() {
			c := lock.New(rdb, &lock.Options{Owner: p[0], Recorder: em})
			c.Do(ctx, p[1], 30*time.Second, nil, func(ctx context.Context) error {
				ready.Done()
				<-both
				wctx, cancel := context.WithTimeout(ctx, time.Minute)
				defer cancel()
				stop := context.AfterFunc(deadlocked, cancel)
				defer stop()
				_, err := c.Obtain(wctx, p[2], 30*time.Second, &lock.ObtainOptions{Retry: lock.LinearBackoff(50 * time.Millisecond)})
				return err
			})
		})
	}
	t.Cleanup(done.Wait)
	t.Cleanup(endDeadlock) // before done.Wait
	ready.Wait()
	close(both)
	formed := time.Now()
	if !redistest.Poll(within(time.Minute), func() bool {
		var got []alert
		for _, a := range prom.alerts(t, "LockDeadlock") {
			if a.State == "firing" {
				got = append(got, a)
			}
		}
		if len(got) > 0 {
			if len(got) != 1 || got[0].Labels["severity"] != "critical" || !strings.HasPrefix(got[0].Annotations["description"], "1 deadlock(s)") {
				t.Errorf("firing LockDeadlock alerts = %+v, want one, critical, for 1 deadlock", got)
			}
			t.Logf("LockDeadlock firing %v after the deadlock formed (for %s, two replicas scraped)", time.Since(formed).Round(time.Millisecond), testFor)
			return true
		}
		return false
	}) {
		t.Fatalf("LockDeadlock not firing a minute after a deadlock formed; deadlock_cycles in Prometheus = %v\n%s",
			prom.value(t, `max(lockscope_deadlock_cycles)`), prom.logs())
	}
	endDeadlock()
}

// isLockAlert reports whether name is one of the Lock* alerts about locks,
// as opposed to the Lockscope* alerts about lockscope itself (LockscopeDown
// is pending until the first scrape, whatever the workload).
func isLockAlert(name string) bool {
	return strings.HasPrefix(name, "Lock") && !strings.HasPrefix(name, "Lockscope")
}

func quoteAll(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = strconv.Quote(s)
	}
	return strings.Join(q, ", ")
}

// prometheusServer is a running Prometheus server.
type prometheusServer struct{ *promqltest.Server }

func (p *prometheusServer) logs() string { return p.Logs() }

func (p *prometheusServer) get(t *testing.T, path string, data any) {
	t.Helper()
	p.Get(t, path, data)
}

// startReplicas runs one collector per replica name on stream, each counting
// into its own aggregator (made from cfg) and serving /metrics on a loopback
// port, as `lockscope serve` replicas do. It returns the /metrics addresses
// and the aggregators; all stop when ctx ends.
func startReplicas(ctx context.Context, t *testing.T, rdb redis.UniversalClient, stream string, cfg state.Config, replicas ...string) ([]string, []*state.Aggregator) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	var targets []string
	var aggs []*state.Aggregator
	for _, replica := range replicas {
		exp := promexport.New()
		cfg.Metrics = exp
		a := state.New(cfg)
		reg := prometheus.NewRegistry()
		if err := exp.Register(reg, a); err != nil {
			t.Fatalf("Register = %v", err)
		}
		col := collector.New(rdb, a, &collector.Options{Stream: stream, Replica: replica, Block: 100 * time.Millisecond})
		colDone := make(chan struct{})
		go func() { defer close(colDone); col.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-colDone })
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		metrics := httptest.NewServer(mux)
		t.Cleanup(metrics.Close)
		targets = append(targets, metrics.Listener.Addr().String())
		aggs = append(aggs, a)
	}
	return targets, aggs
}

// startEmitter is the lock library's emitter on stream, closed at the end of
// the test.
func startEmitter(t *testing.T, rdb redis.UniversalClient, stream string) *lock.Emitter {
	em := lock.NewEmitter(rdb, &lock.EmitterOptions{Stream: stream, FlushInterval: 20 * time.Millisecond})
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer ccancel()
		em.Close(cctx)
	})
	return em
}

// startPrometheus runs /usr/bin/prometheus on a free loopback port,
// scraping target as job "lockscope" every second and evaluating the
// shipped rules (with testFor) every second.
func startPrometheus(t *testing.T, targets ...string) *prometheusServer {
	t.Helper()
	dir := t.TempDir()
	rules := promqltest.ReadRules(t, rulesFile)
	for gi := range rules.Groups {
		for ri := range rules.Groups[gi].Rules {
			if rules.Groups[gi].Rules[ri].Alert != "" {
				rules.Groups[gi].Rules[ri].For = testFor
			}
		}
	}
	promqltest.WriteRules(t, filepath.Join(dir, "lockscope.rules.yml"), rules)
	config := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 900ms
  evaluation_interval: 1s
rule_files:
  - %s
scrape_configs:
  - job_name: lockscope
    static_configs:
      - targets: [%s]
`, filepath.Join(dir, "lockscope.rules.yml"), quoteAll(targets))
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}

	return &prometheusServer{promqltest.StartServer(t, filepath.Join(dir, "prometheus.yml"))}
}

type alert struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	State       string            `json:"state"`
	Value       string            `json:"value"`
}

// alerts returns the pending and firing alerts whose name starts with
// prefix.
func (p *prometheusServer) alerts(t *testing.T, prefix string) []alert {
	t.Helper()
	var data struct {
		Alerts []alert `json:"alerts"`
	}
	p.get(t, "/api/v1/alerts", &data)
	var out []alert
	for _, a := range data.Alerts {
		if strings.HasPrefix(a.Labels["alertname"], prefix) {
			out = append(out, a)
		}
	}
	return out
}

// checkDashboardWithTwoReplicas evaluates every query of the provisioned
// Grafana dashboards twice, with the instance variable at All and at the
// replica one alone, and fails t where they differ by more than a quarter
// (one replica's rate windows end at other scrapes than the other's;
// counting a lock once per replica would double the figure), or, for ages,
// by more than 3 s.
func checkDashboardWithTwoReplicas(t *testing.T, prom *prometheusServer, replicas []string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "grafana", "dashboards", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Grafana dashboards: %v", err)
	}
	type panel struct {
		Title   string                  `json:"title"`
		Targets []struct{ Expr string } `json:"targets"`
		Panels  []json.RawMessage       `json:"panels"`
	}
	var exprs [][2]string // panel title, query
	var walk func([]json.RawMessage)
	walk = func(raw []json.RawMessage) {
		for _, r := range raw {
			var p panel
			if err := json.Unmarshal(r, &p); err != nil {
				t.Fatal(err)
			}
			for _, tg := range p.Targets {
				exprs = append(exprs, [2]string{p.Title, tg.Expr})
			}
			walk(p.Panels)
		}
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var d struct{ Panels []json.RawMessage }
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatal(err)
		}
		walk(d.Panels)
	}
	vars := func(instance string) *strings.Replacer {
		return strings.NewReplacer("$__rate_interval", "1m", "$class", ".*", "$job", ".+", "$instance", instance)
	}
	all := vars(".+")
	var singles []*strings.Replacer
	for _, one := range replicas {
		singles = append(singles, vars(strings.ReplaceAll(regexp.QuoteMeta(one), `\`, `\\`))) // escaped as Grafana does inside a PromQL string
	}
	// Every query is evaluated at one instant, a little in the past so that
	// both replicas' scrapes of it are in: the figures compared are of the
	// same samples, however long the queries themselves take on a loaded
	// host. Counted once, two replicas give what the larger of them alone
	// gives; counted twice, about double.
	at := time.Now().Add(-2 * time.Second)
	checked := 0
	for _, e := range exprs {
		if strings.Contains(e[1], "up{") {
			continue // counts the scraped targets: 2, by design
		}
		a, o := prom.sumAt(t, all.Replace(e[1]), at), 0.0
		for _, single := range singles {
			o = math.Max(o, prom.sumAt(t, single.Replace(e[1]), at))
		}
		tolerance := 0.25*math.Max(math.Abs(a), math.Abs(o)) + 1e-9
		if strings.Contains(e[1], "time() -") {
			// An age: the replicas' last scrapes are up to a scrape
			// interval (1s) apart, whatever the age.
			tolerance = 3
		}
		if math.Abs(a-o) > tolerance {
			t.Errorf("Grafana panel %q with two replicas scraped shows %v, the larger of one replica alone %v: %s", e[0], a, o, e[1])
		}
		checked++
	}
	t.Logf("%d Grafana queries give the same figures with two replicas scraped as with one", checked)
}

// sumAt evaluates query at the instant at (now when zero) and adds up its
// series (scalar or vector); an empty result is 0.
func (p *prometheusServer) sumAt(t *testing.T, query string, at time.Time) float64 {
	t.Helper()
	var data struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	path := "/api/v1/query?query=" + url.QueryEscape(query)
	if !at.IsZero() {
		path += "&time=" + strconv.FormatFloat(float64(at.UnixMilli())/1000, 'f', 3, 64)
	}
	p.get(t, path, &data)
	var values [][2]any
	switch data.ResultType {
	case "scalar":
		var v [2]any
		if err := json.Unmarshal(data.Result, &v); err != nil {
			t.Fatal(err)
		}
		values = append(values, v)
	case "vector":
		var vec []struct {
			Value [2]any `json:"value"`
		}
		if err := json.Unmarshal(data.Result, &vec); err != nil {
			t.Fatal(err)
		}
		for _, x := range vec {
			values = append(values, x.Value)
		}
	default:
		t.Fatalf("query %q: result type %q", query, data.ResultType)
	}
	sum := 0.0
	for _, v := range values {
		s, _ := v[1].(string)
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			t.Fatalf("query %q value %q: %v", query, s, err)
		}
		if !math.IsNaN(f) {
			sum += f
		}
	}
	return sum
}

// value evaluates a scalar-valued query now; an empty result is 0.
func (p *prometheusServer) value(t *testing.T, query string) float64 {
	t.Helper()
	var data struct {
		Result []struct {
			Value [2]any `json:"value"`
		} `json:"result"`
	}
	p.get(t, "/api/v1/query?query="+url.QueryEscape(query), &data)
	if len(data.Result) == 0 {
		return 0
	}
	s, _ := data.Result[0].Value[1].(string)
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatalf("query %q value %q: %v", query, s, err)
	}
	return v
}

// rulesEvaluatedAfter reports whether every rule was last evaluated after
// at, and fails t if any rule's evaluation errs (a real Prometheus catches
// what promtool's unit tests cannot, e.g. duplicate label sets at runtime).
func (p *prometheusServer) rulesEvaluatedAfter(t *testing.T, at time.Time) bool {
	t.Helper()
	var data struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Name           string    `json:"name"`
				Health         string    `json:"health"`
				LastError      string    `json:"lastError"`
				LastEvaluation time.Time `json:"lastEvaluation"`
			} `json:"rules"`
		} `json:"groups"`
	}
	p.get(t, "/api/v1/rules", &data)
	n, after := 0, true
	for _, g := range data.Groups {
		for _, r := range g.Rules {
			n++
			if r.Health == "err" {
				t.Fatalf("rule %s/%s: evaluation error %s", g.Name, r.Name, r.LastError)
			}
			if r.LastEvaluation.Before(at) {
				after = false
			}
		}
	}
	if want := len(promqltest.ReadRules(t, rulesFile).Groups); len(data.Groups) != want {
		t.Fatalf("Prometheus loaded %d rule groups, want %d", len(data.Groups), want)
	}
	return n > 0 && after
}
