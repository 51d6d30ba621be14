package event

import (
	"encoding/hex"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// The Python packer of docs/events.md (pack and pack_ext), run as a reader
// would paste it, writes the bytes the Go encoder writes.
func TestDocsPythonPackerMatchesGo(t *testing.T) {
	doc, err := os.ReadFile("../docs/events.md")
	if err != nil {
		t.Fatal(err)
	}
	var code strings.Builder
	for _, m := range regexp.MustCompile("(?s)```python\n(.*?)```").FindAllSubmatch(doc, -1) {
		if strings.Contains(string(m[1]), "def ") {
			code.Write(m[1])
			code.WriteString("\n")
		}
	}
	if !strings.Contains(code.String(), "def pack(") || !strings.Contains(code.String(), "def pack_ext(") {
		t.Fatalf("docs/events.md has no Python pack and pack_ext:\n%s", code.String())
	}
	code.WriteString(`
import sys
events = [
    {"type": "acquired", "key": b"job:42", "owner": "api/h1/7", "lease": "L1", "ts": 1700000000000000000,
     "wait": 1500000, "ttl": 30000, "attempts": 2, "fence": 5},
    {"type": "renewed", "key": b"job:42", "owner": "api/h1/7", "lease": "L1", "ts": 1700000000250000000, "ttl": 30000,
     "trace_id": bytes([0xaa] + [0] * 14 + [0xbb]), "span_id": bytes([0] * 7 + [0xcc]), "headroom": 300},
    {"type": "released", "key": b"job:42", "owner": "api/h1/7", "lease": "L1", "ts": 1700000000000000000, "hold": 250000000},
]
sys.stdout.write(pack(events).hex() + " " + pack_ext(events).hex())
`)
	py := "/usr/bin/python3" // Debian's: what CI installs
	out, err := exec.Command(py, "-c", code.String()).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", py, err, out)
	}
	evs := []Event{
		{Type: Acquired, Key: "job:42", Owner: "api/h1/7", Lease: "L1", TS: 1700000000000000000, Wait: 1500000, TTL: 30000 * 1e6, Attempts: 2, Fence: 5},
		{Type: Renewed, Key: "job:42", Owner: "api/h1/7", Lease: "L1", TS: 1700000000250000000, TTL: 30000 * 1e6,
			TraceID: TraceID{0: 0xaa, 15: 0xbb}, SpanID: SpanID{7: 0xcc}, Headroom: 300},
		{Type: Released, Key: "job:42", Owner: "api/h1/7", Lease: "L1", TS: 1700000000000000000, Hold: 250000000},
	}
	b, x := PackAll(evs)
	if want := hex.EncodeToString(b) + " " + hex.EncodeToString(x); string(out) != want {
		t.Errorf("the docs' Python packer wrote\n%s\nthe Go encoder\n%s", out, want)
	}
}
