package dashboard

import (
	"context"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockscope/lockscope/internal/keytext"
	"github.com/lockscope/lockscope/lock"
)

// A forced release's audit line must say which key and whose lock, also in a
// JSON log, which replaces invalid UTF-8: a key (owner) that is not UTF-8
// carries its exact bytes in key_b64 (owner_b64), as in the API.
func TestAuditLogKeepsTheBytesOfAKey(t *testing.T) {
	f := newFixture(t, operatorOptions())
	ctx := context.Background()
	key, owner := f.pfx+"bin\xff\xfe\n", "worker\xc3"
	if _, err := f.lc.Obtain(ctx, key, time.Minute, &lock.ObtainOptions{Owner: owner}); err != nil {
		t.Fatal(err)
	}
	h, err := f.lc.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	rec := f.do(t, req{method: http.MethodPost, target: "/api/v1/locks/" + keytext.PathSegment(key) + "/release",
		json: map[string]string{"fingerprint": h.Fingerprint, "reason": "audit test"}, bearer: testToken})
	if rec.Code != http.StatusOK {
		t.Fatalf("POST release = %d %s, want 200", rec.Code, rec.Body)
	}
	logs := f.logs.String()
	// The text handler quotes a value with '=' in it (base64 padding).
	for name, v := range map[string]string{"key_b64": base64.StdEncoding.EncodeToString([]byte(key)),
		"owner_b64": base64.StdEncoding.EncodeToString([]byte(owner)), "by": "ci-bot"} {
		if !strings.Contains(logs, " "+name+"="+v+" ") && !strings.Contains(logs, " "+name+"="+strconv.Quote(v)+" ") {
			t.Errorf("audit log lacks %s=%s:\n%s", name, v, logs)
		}
	}
}
