package reliability

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

// The redis-cli example of docs/events.md, run as a reader would paste it,
// shows job:42 held by billing/host-3/911: not an expiration of long ago.
func TestDocsRedisCLIExampleShowsAHolder(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/events.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```sh\n(redis-cli XADD lockscope:events.*?)```").FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/events.md has no redis-cli XADD example")
	}
	srv := redistest.Start(t, redistest.Options{})
	bin := redistest.Lockscope(t)
	p := startServe(t, bin, srv.URL(), nil)
	script := strings.Replace(string(m[1]), "redis-cli ", "redis-cli -p "+srv.Addr()[strings.LastIndex(srv.Addr(), ":")+1:]+" ", 1)
	if out, err := exec.Command("sh", "-c", script).CombinedOutput(); err != nil {
		t.Fatalf("the example failed: %v\n%s\n%s", err, script, out)
	}
	var lock struct {
		Held  bool   `json:"held"`
		Owner string `json:"owner"`
	}
	var ov struct {
		Expirations int64 `json:"expirations_5m"`
	}
	ctx := testCtx(t, 10*time.Second)
	ok := redistest.Poll(ctx, func() bool {
		return getJSON(p.url("/api/v1/locks/job:42"), &lock) && lock.Held
	})
	if !ok || lock.Owner != "billing/host-3/911" {
		t.Errorf("after the docs' example job:42 = %+v, want held by billing/host-3/911", lock)
	}
	if getJSON(p.url("/api/v1/overview"), &ov); ov.Expirations != 0 {
		t.Errorf("the docs' example recorded %d expirations, want 0", ov.Expirations)
	}
}

func getJSON(url string, v any) bool {
	resp, err := http.Get(url)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode == 200 && json.Unmarshal(b, v) == nil
}
