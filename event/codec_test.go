package event

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func sample() []Event {
	return []Event{
		{Type: Acquired, Key: "workflow:123", Owner: "api/host-1/42", Lease: "L1", TS: 1_700_000_000_000_000_000, Wait: 1500 * time.Microsecond, TTL: 30 * time.Second, Attempts: 3, Fence: 17},
		{Type: Failed, Key: "<script>alert(1)</script>\n\"'", Owner: "w", TS: 1_700_000_000_000_000_100, Wait: time.Second, Attempts: 9, Reason: ReasonTimeout, Holder: "other"},
		{Type: Released, Key: string([]byte{0xff, 0xfe, 'k'}), Owner: "o", Lease: "L1", TS: 1_699_999_999_000_000_000, Hold: 2 * time.Minute},
		{Type: Dropped, Key: "", Owner: "emitter", TS: 1_700_000_000_000_000_200, Count: 12345},
		{Type: Forced, Key: strings.Repeat("k", 10_000), Owner: "old", By: "alice", Reason: "stuck since lunch", TS: 1_700_000_000_000_000_300, Hold: time.Hour},
		{Type: Acquired, Key: "d", TS: 5, Degraded: true, Passive: true},
		{Type: Renewed, Key: "workflow:123", Owner: "api/host-1/42", Lease: "L1", TS: 1_700_000_000_500_000_000, TTL: 30 * time.Second,
			TraceID: TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
			SpanID:  SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7}, Headroom: 19_800 * time.Millisecond},
		{Type: Waiting, Key: "inventory:sku-1", Owner: "shop/1", Lease: "L9", TS: 1_700_000_000_600_000_000, Holder: "shop/2",
			TraceID: TraceID{15: 1}},
	}
}

func TestPackedRoundTrip(t *testing.T) {
	want := sample()
	b, x := PackAll(want)
	f := PackedEntry(len(want), b, x)
	values := map[string]any{}
	for i := 0; i < len(f); i += 2 {
		v := f[i+1]
		if bs, ok := v.([]byte); ok {
			v = string(bs) // go-redis returns strings
		}
		values[f[i].(string)] = v
	}
	got, err := Decode(values)
	if err != nil {
		t.Fatalf("Decode = %v", err)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("packed round trip (-want +got):\n%s", d)
	}
}

func TestSingleRoundTrip(t *testing.T) {
	for _, want := range sample() {
		if want.TS <= 0 {
			continue
		}
		f := AppendFields(nil, &want)
		values := map[string]any{"unknown_field": "ignored"}
		for i := 0; i < len(f); i += 2 {
			values[f[i]] = f[i+1]
		}
		got, err := Decode(values)
		if err != nil {
			t.Fatalf("Decode(%v) = %v", want.Type, err)
		}
		if d := cmp.Diff([]Event{want}, got); d != "" {
			t.Errorf("single round trip of %v (-want +got):\n%s", want.Type, d)
		}
	}
}

func TestDecodeFromAnotherLanguage(t *testing.T) {
	// What a Python emitter would send with one XADD.
	got, err := Decode(map[string]any{"v": "1", "type": "renew_failed", "key": "lock:job", "owner": "py/1", "ts": "1700000000000000000", "ttl": "5000", "reason": "error"})
	if err != nil {
		t.Fatal(err)
	}
	want := []Event{{Type: RenewFailed, Key: "lock:job", Owner: "py/1", TS: 1700000000000000000, TTL: 5 * time.Second, Reason: "error"}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}

func TestDecodeErrors(t *testing.T) {
	good := Pack(sample())
	cases := []struct {
		name   string
		values map[string]any
		want   error
	}{
		{"no version", map[string]any{"type": "acquired", "key": "k", "ts": "1"}, ErrMalformed},
		{"future version", map[string]any{"v": "99", "type": "acquired", "key": "k", "ts": "1"}, ErrVersion},
		{"bad version", map[string]any{"v": "x"}, ErrMalformed},
		{"unknown type", map[string]any{"v": "1", "type": "exploded", "key": "k", "ts": "1"}, ErrUnknownType},
		{"no key", map[string]any{"v": "1", "type": "acquired", "ts": "1"}, ErrMalformed},
		{"no ts", map[string]any{"v": "1", "type": "acquired", "key": "k"}, ErrMalformed},
		{"bad int", map[string]any{"v": "1", "type": "acquired", "key": "k", "ts": "1", "fence": "NaN"}, ErrMalformed},
		{"negative wait", map[string]any{"v": "1", "type": "acquired", "key": "k", "ts": "1", "wait": "-5"}, ErrMalformed},
		{"huge key", map[string]any{"v": "1", "type": "acquired", "key": strings.Repeat("x", MaxStringLen+1), "ts": "1"}, ErrTooLarge},
		{"truncated batch", map[string]any{"v": "1", "n": "6", "batch": string(good[:len(good)-3])}, ErrMalformed},
		{"count too high", map[string]any{"v": "1", "n": "7", "batch": string(good)}, ErrMalformed},
		{"count too low", map[string]any{"v": "1", "n": "5", "batch": string(good)}, ErrMalformed},
		{"bad count", map[string]any{"v": "1", "n": "-1", "batch": string(good)}, ErrMalformed},
		{"too many", map[string]any{"v": "1", "n": "10001", "batch": string(good)}, ErrTooLarge},
		{"garbage", map[string]any{"v": "1", "n": "1", "batch": "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"}, ErrMalformed},
		{"bad type byte", map[string]any{"v": "1", "n": "1", "batch": string(append([]byte{99}, good[1:len(Pack(sample()[:1]))]...))}, ErrUnknownType},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			prev := []Event{{Type: Acquired, Key: "kept"}}
			got, err := DecodeAppend(prev, c.values)
			if !errors.Is(err, c.want) {
				t.Fatalf("DecodeAppend = %v, want an error wrapping %v", err, c.want)
			}
			if len(got) != 1 || got[0].Key != "kept" {
				t.Fatalf("DecodeAppend changed dst on error: %d events", len(got))
			}
		})
	}
}

func TestTypeNames(t *testing.T) {
	want := []string{"acquired", "failed", "released", "renewed", "renew_failed", "lost", "expired", "forced", "dropped", "waiting", "requested", "fence_rejected"}
	var got []string
	for _, ty := range Types() {
		got = append(got, ty.String())
		if ParseType(ty.String()) != ty {
			t.Errorf("ParseType(%q) = %v, want %v", ty.String(), ParseType(ty.String()), ty)
		}
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("type names (-want +got):\n%s", d)
	}
	if ParseType("invalid") != TypeInvalid || TypeInvalid.Valid() {
		t.Error("invalid type parsed as valid")
	}
}

func FuzzDecode(f *testing.F) {
	f.Add("1", "2", string(Pack(sample()[:2])), "acquired", "k", "1")
	f.Add("1", "", "", "released", "k", "17")
	f.Add("2", "1", "\x01\x00", "x", "", "")
	f.Fuzz(func(t *testing.T, v, n, batch, typ, key, ts string) {
		values := map[string]any{"v": v, "type": typ, "key": key, "ts": ts}
		if n != "" || batch != "" {
			values["n"], values["batch"] = n, batch
		}
		evs, err := Decode(values)
		if err != nil {
			if evs != nil {
				t.Fatalf("Decode returned %d events with error %v", len(evs), err)
			}
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrVersion) && !errors.Is(err, ErrTooLarge) && !errors.Is(err, ErrUnknownType) {
				t.Fatalf("Decode error %v wraps no sentinel", err)
			}
			return
		}
		// Whatever decodes must re-encode and decode to the same events.
		b, x := PackAll(evs)
		again, err := Decode(map[string]any{"v": "1", "n": itoa(len(evs)), "batch": string(b), "x": string(x)})
		if err != nil {
			t.Fatalf("re-decode = %v", err)
		}
		if d := cmp.Diff(evs, again); d != "" {
			t.Fatalf("re-encode changed events (-first +second):\n%s", d)
		}
	})
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

func BenchmarkDecodeBatch(b *testing.B) {
	evs := make([]Event, 256)
	for i := range evs {
		evs[i] = Event{Type: Acquired, Key: "inventory:sku-" + itoa(i%16), Owner: "api/host/1", Lease: "abcdef12", TS: int64(1e18) + int64(i)*1000, Wait: time.Millisecond, TTL: 10 * time.Second, Attempts: 2}
	}
	batch := string(Pack(evs))
	dst := make([]Event, 0, 256)
	b.ReportAllocs()
	b.SetBytes(int64(len(batch)))
	for b.Loop() {
		var err error
		dst, err = DecodeBatch(dst[:0], batch, len(evs))
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(evs)), "ns/event")
}
