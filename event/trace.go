package event

import "encoding/hex"

// TraceID is an OpenTelemetry (W3C Trace Context) trace id: 16 bytes, the
// zero value meaning none. The event package knows nothing of OpenTelemetry:
// emitters copy the caller's span context's ids here (see extra/ for the
// glue), and the collector attaches them to what it shows and exports.
type TraceID [16]byte

// SpanID is an OpenTelemetry span id: 8 bytes, the zero value meaning none.
type SpanID [8]byte

// IsValid reports whether t is set (not all zero bytes).
func (t TraceID) IsValid() bool { return t != TraceID{} }

// IsValid reports whether s is set (not all zero bytes).
func (s SpanID) IsValid() bool { return s != SpanID{} }

// String returns t as 32 lowercase hex digits, or "" when t is not set.
func (t TraceID) String() string {
	if !t.IsValid() {
		return ""
	}
	return hex.EncodeToString(t[:])
}

// String returns s as 16 lowercase hex digits, or "" when s is not set.
func (s SpanID) String() string {
	if !s.IsValid() {
		return ""
	}
	return hex.EncodeToString(s[:])
}

// ParseTraceID parses 32 hex digits (either case). ok is false for any
// other input and for the all-zero id, which W3C Trace Context calls
// invalid.
func ParseTraceID(s string) (t TraceID, ok bool) {
	if len(s) != 2*len(t) {
		return TraceID{}, false
	}
	if _, err := hex.Decode(t[:], []byte(s)); err != nil {
		return TraceID{}, false
	}
	return t, t.IsValid()
}

// ParseSpanID parses 16 hex digits (either case); ok is false otherwise and
// for the all-zero id.
func ParseSpanID(s string) (id SpanID, ok bool) {
	if len(s) != 2*len(id) {
		return SpanID{}, false
	}
	if _, err := hex.Decode(id[:], []byte(s)); err != nil {
		return SpanID{}, false
	}
	return id, id.IsValid()
}
