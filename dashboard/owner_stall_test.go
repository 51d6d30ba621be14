package dashboard

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/internal/testkit/faultproxy"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/lockscope/lockscope/lock"
)

// TestOwnerReleaseAllBoundedWhileRedisStalls: a release-all of 40 keys
// while Redis stalls (it accepts and never answers, through a fault proxy)
// stops at the POST's budget: the keys being asked fail, every key not
// reached by then is reported "not attempted", nothing is released, and
// the answer says so (before, each key waited its own 5 s: 500 keys took
// some 40 minutes in one POST). Once Redis answers again, the same form
// releases them all.
func TestOwnerReleaseAllBoundedWhileRedisStalls(t *testing.T) {
	f := newFixture(t, operatorOptions())
	proxy := faultproxy.Start(t, redistest.Shared(t).Addr())
	slow := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ReadTimeout: -1, WriteTimeout: -1, MaxRetries: -1})
	t.Cleanup(func() { slow.Close() })
	opt := *operatorOptions()
	opt.ReleaseAllBudget = time.Second
	opt.Logger = slog.New(slog.DiscardHandler)
	h, err := New(f.agg, lock.New(slow, &lock.Options{Owner: "dashboard", Recorder: &applyRecorder{agg: f.agg}}), &opt)
	if err != nil {
		t.Fatal(err)
	}
	f.h = h
	const owner, n = "pod-7", 40
	for i := range n {
		f.obtain(t, fmt.Sprintf("%sjob:%02d", f.pfx, i), owner, time.Minute, false)
	}
	action, fields := ownerForm(t, f, owner)
	if len(fields) != n {
		t.Fatalf("release-all form lists %d locks, want %d", len(fields), n)
	}
	post := func() map[string]int {
		rec := f.do(t, req{method: "POST", target: action, basic: [2]string{testUser, testPass}, form: url.Values{"lock": fields, "reason": {"pod died"}}})
		out := map[string]int{}
		for _, row := range byTestID(htmlDoc(t, rec), "owner-result-row") {
			o := attr(row, "data-outcome")
			if o == "error" && strings.Contains(text(row), "not attempted") {
				o = "not attempted"
			}
			out[o]++
		}
		out["status"] = rec.Code
		return out
	}
	proxy.Stall()
	got := post()
	proxy.Resume()
	if got["released"] != 0 || got["not attempted"] == 0 || got["error"]+got["not attempted"] != n || got["status"] != http.StatusBadGateway {
		t.Errorf("release-all while Redis stalls: %v; want every key an error, those not reached by the budget \"not attempted\", 502", got)
	}
	for i := range n {
		if k := fmt.Sprintf("%sjob:%02d", f.pfx, i); f.rdb.Exists(context.Background(), k).Val() != 1 {
			t.Errorf("%s released while Redis stalled", k)
		}
	}
	if got := post(); got["released"] != n {
		t.Errorf("release-all once Redis answers: %v, want all %d released", got, n)
	}
}
