package event

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

// The cross-language golden files (testdata/golden): events.json lists
// events both codecs must agree on; this test writes go.packed and
// go.ext and go.single.json (with -update) and decodes python.packed,
// python.ext and python.single.json, which the Python package's tests write
// (clients/python/tests/test_golden.py), and node.packed, node.ext and
// node.single.json, which the Node package's tests write
// (clients/node/test/golden.test.js); both decode Go's files.

var update = flag.Bool("update", false, "rewrite testdata/golden/go.* from events.json")

const goldenDir = "testdata/golden"

type goldenEvent struct {
	Type     string `json:"type"`
	Key      string `json:"key"`
	KeyHex   string `json:"key_hex"`
	Owner    string `json:"owner"`
	Lease    string `json:"lease"`
	TS       int64  `json:"ts"`
	Wait     int64  `json:"wait"`
	Hold     int64  `json:"hold"`
	TTL      int64  `json:"ttl"` // ms
	Attempts int    `json:"attempts"`
	Fence    int64  `json:"fence"`
	Reason   string `json:"reason"`
	Count    int64  `json:"count"`
	Holder   string `json:"holder"`
	By       string `json:"by"`
	Degraded bool   `json:"degraded"`
	Passive  bool   `json:"passive"`
	TraceID  string `json:"trace_id"`
	SpanID   string `json:"span_id"`
	Headroom int64  `json:"headroom"`
}

func goldenEvents(t *testing.T) []Event {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(goldenDir, "events.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct{ Events []goldenEvent }
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("events.json: %v", err)
	}
	out := make([]Event, len(doc.Events))
	var ok bool
	for i, g := range doc.Events {
		key := g.Key
		if g.KeyHex != "" {
			k, err := hex.DecodeString(g.KeyHex)
			if err != nil {
				t.Fatalf("events.json event %d: key_hex: %v", i, err)
			}
			key = string(k)
		}
		ty := ParseType(g.Type)
		if !ty.Valid() {
			t.Fatalf("events.json event %d: type %q", i, g.Type)
		}
		out[i] = Event{Type: ty, Key: key, Owner: g.Owner, Lease: g.Lease, TS: g.TS, Wait: time.Duration(g.Wait),
			Hold: time.Duration(g.Hold), TTL: time.Duration(g.TTL) * time.Millisecond, Attempts: g.Attempts,
			Fence: g.Fence, Reason: g.Reason, Count: g.Count, Holder: g.Holder, By: g.By,
			Degraded: g.Degraded, Passive: g.Passive, Headroom: time.Duration(g.Headroom)}
		if g.TraceID != "" {
			if out[i].TraceID, ok = ParseTraceID(g.TraceID); !ok {
				t.Fatalf("events.json event %d: trace_id %q", i, g.TraceID)
			}
		}
		if g.SpanID != "" {
			if out[i].SpanID, ok = ParseSpanID(g.SpanID); !ok {
				t.Fatalf("events.json event %d: span_id %q", i, g.SpanID)
			}
		}
	}
	if len(out) < len(Types()) {
		t.Fatalf("events.json has %d events, fewer than the %d types", len(out), len(Types()))
	}
	return out
}

// singleEntries is the JSON form of single-event entries: field/value pairs
// in order, a value that is not UTF-8 as {"hex": ...}.
type singleEntries [][][2]json.RawMessage

func encodeSingles(events []Event) singleEntries {
	out := make(singleEntries, len(events))
	for i := range events {
		f := AppendFields(nil, &events[i])
		for j := 0; j < len(f); j += 2 {
			name, _ := json.Marshal(f[j])
			var v []byte
			if utf8.ValidString(f[j+1]) {
				v, _ = json.Marshal(f[j+1])
			} else {
				v, _ = json.Marshal(map[string]string{"hex": hex.EncodeToString([]byte(f[j+1]))})
			}
			out[i] = append(out[i], [2]json.RawMessage{name, v})
		}
	}
	return out
}

func decodeSingles(t *testing.T, b []byte) []Event {
	t.Helper()
	var entries singleEntries
	if err := json.Unmarshal(b, &entries); err != nil {
		t.Fatal(err)
	}
	var out []Event
	for i, pairs := range entries {
		values := map[string]any{}
		for _, p := range pairs {
			var name string
			if err := json.Unmarshal(p[0], &name); err != nil {
				t.Fatalf("entry %d: %v", i, err)
			}
			var s string
			if err := json.Unmarshal(p[1], &s); err != nil {
				var h struct{ Hex string }
				if err := json.Unmarshal(p[1], &h); err != nil {
					t.Fatalf("entry %d field %s: %v", i, name, err)
				}
				b, err := hex.DecodeString(h.Hex)
				if err != nil {
					t.Fatalf("entry %d field %s: %v", i, name, err)
				}
				s = string(b)
			}
			values[name] = s
		}
		evs, err := Decode(values)
		if err != nil {
			t.Fatalf("Decode(entry %d) = %v", i, err)
		}
		out = append(out, evs...)
	}
	return out
}

func writeOrCompare(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join(goldenDir, name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./event -run Golden -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from what this build encodes: %d bytes, want %d (run go test ./event -run Golden -update if the change is meant)", name, len(got), len(want))
	}
}

func TestGoldenGoEncoding(t *testing.T) {
	events := goldenEvents(t)
	batch, ext := PackAll(events)
	writeOrCompare(t, "go.packed", batch)
	writeOrCompare(t, "go.ext", ext)
	// One entry per line.
	var js bytes.Buffer
	js.WriteString("[\n")
	for i, e := range encodeSingles(events) {
		b, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 {
			js.WriteString(",\n")
		}
		js.Write(b)
	}
	js.WriteString("\n]\n")
	writeOrCompare(t, "go.single.json", js.Bytes())
}

// TestGoldenPartitions writes where partitioned streams put keys, which
// the Python emitter must reproduce.
func TestGoldenPartitions(t *testing.T) {
	type placed struct {
		KeyHex    string `json:"key_hex"`
		N         int    `json:"n"`
		Partition int    `json:"partition"`
	}
	var doc struct {
		Streams map[int][]string `json:"streams"`
		Keys    []placed         `json:"keys"`
	}
	doc.Streams = map[int][]string{}
	for _, n := range []int{1, 2, 3, 16, 1024, 2000} {
		doc.Streams[n] = Streams("lockscope:events", n)
	}
	for _, k := range []string{"", "workflow:123", "lock:payment:9f2c", "\xff\xfe", "cron:nightly"} {
		for _, n := range []int{1, 3, 16, 1024} {
			doc.Keys = append(doc.Keys, placed{hex.EncodeToString([]byte(k)), n, PartitionOf(k, n)})
		}
	}
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	writeOrCompare(t, "go.partitions.json", append(b, '\n'))
}

// TestGoldenDecodesPython: the entries the Python package encoded decode to
// the same events, and its packed bytes and extension are Go's, byte for
// byte.
func TestGoldenDecodesPython(t *testing.T) {
	testGoldenDecodes(t, "python", "written by the Python tests: make test, or pytest in clients/python")
}

// TestGoldenDecodesNode: the same for the Node package's files, which its
// tests write (clients/node/test/golden.test.js).
func TestGoldenDecodesNode(t *testing.T) {
	testGoldenDecodes(t, "node", "written by the Node tests: make test, or npm test in clients/node")
}

func testGoldenDecodes(t *testing.T, lang, writer string) {
	want := goldenEvents(t)
	packed, err := os.ReadFile(filepath.Join(goldenDir, lang+".packed"))
	if err != nil {
		t.Fatalf("%v (%s)", err, writer)
	}
	ext, err := os.ReadFile(filepath.Join(goldenDir, lang+".ext"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(map[string]any{"v": "1", "n": itoa(len(want)), "batch": string(packed), "x": string(ext)})
	if err != nil {
		t.Fatalf("Decode(%s.packed, %s.ext) = %v", lang, lang, err)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("%s.packed with %s.ext decoded (-want +got):\n%s", lang, lang, d)
	}
	if batch, x := PackAll(want); !bytes.Equal(packed, batch) || !bytes.Equal(ext, x) {
		t.Errorf("%s.packed and %s.ext are not what PackAll writes for the same events", lang, lang)
	}
	// A collector without the extension reads the same events without
	// their optional fields.
	bare, err := DecodeBatch(nil, string(packed), len(want))
	if err != nil {
		t.Fatal(err)
	}
	for i := range bare {
		bare[i].TraceID, bare[i].SpanID, bare[i].Headroom = want[i].TraceID, want[i].SpanID, want[i].Headroom
	}
	if d := cmp.Diff(want, bare); d != "" {
		t.Errorf("%s.packed without its extension (-want +got):\n%s", lang, d)
	}

	singles, err := os.ReadFile(filepath.Join(goldenDir, lang+".single.json"))
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want, decodeSingles(t, singles)); d != "" {
		t.Errorf("%s.single.json decoded (-want +got):\n%s", lang, d)
	}
}
