package event

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestRequestRoundTrip(t *testing.T) {
	want := Request{Lease: "9f86d081884c7d65", By: "alice", Reason: "I need to edit the workflow — sorry", TS: 1_700_000_000_123_456_789, Grace: 30 * time.Second}
	b := want.Encode()
	got, err := DecodeRequest(b)
	if err != nil {
		t.Fatalf("DecodeRequest(%s) = %v", b, err)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("round trip (-want +got):\n%s", d)
	}
	if got, want := RequestChannel(want.Lease), "lockscope:release-request:9f86d081884c7d65"; got != want {
		t.Errorf("RequestChannel = %q, want %q", got, want)
	}
}

// TestRequestWire pins the message other languages read and write.
func TestRequestWire(t *testing.T) {
	got := string(Request{Lease: "ab", By: "bob", Reason: "r", TS: 5, Grace: 1500 * time.Millisecond}.Encode())
	want := `{"v":1,"lease":"ab","by":"bob","reason":"r","ts":5,"grace_ms":1500}`
	if got != want {
		t.Errorf("Encode = %s, want %s", got, want)
	}
	// Python's json.dumps order and spacing, plus a field from a later
	// minor change: read alike.
	r, err := DecodeRequest([]byte(`{"v": 1, "ts": 5, "lease": "ab", "by": "bob", "reason": "r", "new": [1]}`))
	if err != nil || r.Lease != "ab" || r.Grace != 0 || r.TS != 5 {
		t.Errorf("DecodeRequest(python form) = %+v, %v; want lease ab, ts 5, no grace", r, err)
	}
}

func TestDecodeRequestRefuses(t *testing.T) {
	for _, c := range []string{
		``, `null`, `[]`, `{"v":1}`, `{"v":2,"lease":"ab"}`, `{"v":0,"lease":"ab"}`, `{"v":1,"lease":"ab","grace_ms":-1}`,
		`{"v":1,"lease":"ab","ts":"x"}`, `{"v":1,"lease":"` + strings.Repeat("a", MaxRequestBytes) + `"}`,
	} {
		if r, err := DecodeRequest([]byte(c)); !errors.Is(err, ErrBadRequest) {
			t.Errorf("DecodeRequest(%.40q) = %+v, %v; want ErrBadRequest", c, r, err)
		}
	}
}
