package event

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// withoutExt returns evs with their optional fields cleared: what a
// collector that predates them decodes.
func withoutExt(evs []Event) []Event {
	out := append([]Event(nil), evs...)
	for i := range out {
		out[i].TraceID, out[i].SpanID, out[i].Headroom = TraceID{}, SpanID{}, 0
	}
	return out
}

func TestExtIgnoredByOlderDecoders(t *testing.T) {
	// A collector that predates the extension reads "v", "n" and "batch"
	// and ignores "x": it must decode the same lock steps, without the
	// optional fields, from the very same entry.
	want := sample()
	b, x := PackAll(want)
	if len(x) == 0 {
		t.Fatal("PackAll wrote no extension for events with trace ids and headroom")
	}
	old, err := DecodeBatch(nil, string(b), len(want))
	if err != nil {
		t.Fatalf("DecodeBatch without the extension = %v", err)
	}
	if d := cmp.Diff(withoutExt(want), old); d != "" {
		t.Errorf("batch without its extension (-want +got):\n%s", d)
	}
	// And the batch bytes are those of an encoder that knows nothing of it.
	if got := Pack(want); string(got) != string(b) {
		t.Errorf("PackAll's batch differs from Pack's: the layout must not change")
	}
}

func TestExtNoneWhenNoOptionalFields(t *testing.T) {
	b, x := PackAll(withoutExt(sample()))
	if x != nil {
		t.Errorf("PackAll extension = %x, want none", x)
	}
	f := PackedEntry(3, b, x)
	if len(f) != 6 {
		t.Errorf("PackedEntry without extension has %d items, want the 6 of PackedFields", len(f))
	}
}

func TestExtBytes(t *testing.T) {
	// The layout documented in docs/events.md, byte for byte.
	e := Event{Type: Renewed, TS: 1, TraceID: TraceID{0: 0xaa, 15: 0xbb}, SpanID: SpanID{7: 0xcc}, Headroom: 300}
	got := AppendExt(nil, 2, &e)
	want := []byte{
		2, 32, // event 2, 32 bytes of items
		1, 16, 0xaa, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xbb, // trace id
		2, 8, 0, 0, 0, 0, 0, 0, 0, 0xcc, // span id
		3, 2, 0xac, 0x02, // headroom 300 ns
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("AppendExt (-want +got):\n%s", d)
	}
}

func TestExtLenient(t *testing.T) {
	evs := []Event{{Type: Acquired, Key: "a", TS: 10}, {Type: Renewed, Key: "a", TS: 20}}
	batch := string(Pack(evs))
	// Event 1: an unknown tag 9 (skipped), a trace id of the wrong length
	// (ignored), then a valid headroom.
	x := []byte{1, 12, 9, 3, 'a', 'b', 'c', 1, 2, 'x', 'y', 3, 1, 0x7f}
	got, err := DecodeBatchExt(nil, batch, string(x), 2)
	if err != nil {
		t.Fatalf("DecodeBatchExt = %v", err)
	}
	want := append([]Event(nil), evs...)
	want[1].Headroom = 127
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}

func TestExtMalformed(t *testing.T) {
	evs := []Event{{Type: Acquired, Key: "a", TS: 10}, {Type: Renewed, Key: "a", TS: 20}}
	batch := string(Pack(evs))
	for name, x := range map[string]string{
		"beyond the batch": "\x02\x00",
		"out of order":     "\x01\x00\x00\x00",
		"repeated":         "\x00\x00\x00\x00",
		"cut record":       "\x00\x05\x01",
		"cut item":         "\x00\x03\x01\x10\xaa",
		"cut varint":       "\x00\x80",
		"huge length":      "\x00\xff\xff\xff\xff\x0f",
		"over the limit":   strings.Repeat("\x00", MaxBatchBytes+1),
	} {
		t.Run(name, func(t *testing.T) {
			prev := []Event{{Type: Acquired, Key: "kept"}}
			got, err := DecodeAppend(prev, map[string]any{"v": "1", "n": "2", "batch": batch, "x": x})
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrTooLarge) {
				t.Fatalf("DecodeAppend = %v, want malformed or too large", err)
			}
			if len(got) != 1 || got[0].Key != "kept" {
				t.Fatalf("DecodeAppend changed dst on error: %d events", len(got))
			}
		})
	}
}

func TestSingleEntryOptionalFields(t *testing.T) {
	base := map[string]any{"v": "1", "type": "renewed", "key": "k", "ts": "7", "ttl": "30000"}
	with := func(kv ...string) map[string]any {
		m := map[string]any{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	tid, _ := ParseTraceID("4BF92F3577B34DA6A3CE929D0E0E4736")
	sid, _ := ParseSpanID("00f067aa0ba902b7")
	cases := []struct {
		name string
		in   map[string]any
		want Event
	}{
		{"all", with("trace_id", "4BF92F3577B34DA6A3CE929D0E0E4736", "span_id", "00f067aa0ba902b7", "headroom", "1500000"),
			Event{TraceID: tid, SpanID: sid, Headroom: 1500 * time.Microsecond}},
		{"bad trace id is left out", with("trace_id", "xyz", "span_id", "00f067aa0ba902b7"), Event{SpanID: sid}},
		{"zero trace id is none", with("trace_id", strings.Repeat("0", 32)), Event{}},
		{"short span id is left out", with("span_id", "00f0"), Event{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Decode(c.in)
			if err != nil {
				t.Fatalf("Decode = %v", err)
			}
			want := c.want
			want.Type, want.Key, want.TS, want.TTL = Renewed, "k", 7, 30*time.Second
			if d := cmp.Diff([]Event{want}, got); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
	if _, err := Decode(with("headroom", "-1")); !errors.Is(err, ErrMalformed) {
		t.Errorf("Decode(headroom -1) = %v, want malformed", err)
	}
}

func TestTraceIDText(t *testing.T) {
	id, ok := ParseTraceID("4bf92f3577b34da6a3ce929d0e0e4736")
	if !ok || id.String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("ParseTraceID round trip = %q, %v", id.String(), ok)
	}
	if (TraceID{}).String() != "" || (SpanID{}).String() != "" {
		t.Error("zero ids print as non-empty")
	}
}

func FuzzDecodeExt(f *testing.F) {
	b, x := PackAll(sample())
	f.Add(string(b), string(x), len(sample()))
	f.Add(string(Pack(sample()[:2])), "\x01\x02\x03\x00", 2)
	f.Fuzz(func(t *testing.T, batch, ext string, n int) {
		evs, err := DecodeBatchExt(nil, batch, ext, n)
		if err != nil {
			if evs != nil {
				t.Fatalf("DecodeBatchExt returned %d events with error %v", len(evs), err)
			}
			return
		}
		b, x := PackAll(evs)
		again, err := DecodeBatchExt(nil, string(b), string(x), len(evs))
		if err != nil {
			t.Fatalf("re-decode = %v", err)
		}
		if d := cmp.Diff(evs, again); d != "" {
			t.Fatalf("re-encode changed events (-first +second):\n%s", d)
		}
	})
}
