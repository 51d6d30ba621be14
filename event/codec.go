package event

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
)

// Entry field names. A single-event entry uses the per-event names; a packed
// entry carries FieldVersion, FieldCount and FieldBatch.
const (
	FieldVersion  = "v"
	FieldType     = "type"
	FieldKey      = "key"
	FieldOwner    = "owner"
	FieldLease    = "lease"
	FieldTS       = "ts"       // unix ns
	FieldWait     = "wait"     // ns
	FieldHold     = "hold"     // ns
	FieldTTL      = "ttl"      // ms
	FieldAttempts = "attempts" //
	FieldFence    = "fence"    //
	FieldReason   = "reason"   //
	FieldCountN   = "count"    // Dropped, Requested
	FieldHolder   = "holder"   //
	FieldBy       = "by"       //
	FieldDegraded = "degraded" // "1" when true
	FieldPassive  = "passive"  // "1" when true
	FieldTraceID  = "trace_id" // 32 hex digits
	FieldSpanID   = "span_id"  // 16 hex digits
	FieldHeadroom = "headroom" // ns
	FieldCount    = "n"        // packed: number of events in batch
	FieldBatch    = "batch"    // packed: binary events
	FieldExt      = "x"        // packed, optional: the events' optional fields (see AppendExt)
)

// Limits protect the collector from hostile or corrupt entries.
const (
	MaxBatchEvents = 10000   // events in one packed entry
	MaxStringLen   = 1 << 16 // bytes in one key, owner, reason, ...
	MaxBatchBytes  = 8 << 20 // bytes in one packed batch
)

// EntryBytes is what a writer of the stream (the lock library's sink, the
// collector's watcher) puts in one packed entry at most; an event longer
// than that goes alone. It is well below MaxBatchBytes, which the decoder
// accepts: an XADD holds Redis some 3.7 ns per byte on a stream that still
// grows, so 256 KiB is about 1 ms. The lock emitter's default batch of 2048
// events with 30-byte keys is 149 kB, one entry; with keys of a kilobyte it
// would be 2 MB and hold Redis for some 8 ms (issue 28).
const EntryBytes = 256 << 10

// Sentinel errors returned (wrapped) by Decode.
var (
	ErrMalformed   = errors.New("event: malformed entry")
	ErrVersion     = errors.New("event: unsupported schema version")
	ErrTooLarge    = errors.New("event: entry too large")
	ErrUnknownType = errors.New("event: unknown event type")
)

// AppendFields appends the field/value pairs of a single-event entry for e to
// dst, ready for XADD. Zero-valued optional fields are omitted.
func AppendFields(dst []string, e *Event) []string {
	dst = append(dst, FieldVersion, "1", FieldType, e.Type.String(), FieldKey, e.Key)
	if e.Owner != "" {
		dst = append(dst, FieldOwner, e.Owner)
	}
	if e.Lease != "" {
		dst = append(dst, FieldLease, e.Lease)
	}
	dst = append(dst, FieldTS, strconv.FormatInt(e.TS, 10))
	addInt := func(name string, v int64) {
		if v != 0 {
			dst = append(dst, name, strconv.FormatInt(v, 10))
		}
	}
	addInt(FieldWait, int64(e.Wait))
	addInt(FieldHold, int64(e.Hold))
	addInt(FieldTTL, e.TTL.Milliseconds())
	addInt(FieldAttempts, int64(e.Attempts))
	addInt(FieldFence, e.Fence)
	addInt(FieldCountN, e.Count)
	for _, kv := range [...][2]string{{FieldReason, e.Reason}, {FieldHolder, e.Holder}, {FieldBy, e.By}} {
		if kv[1] != "" {
			dst = append(dst, kv[0], kv[1])
		}
	}
	if e.Degraded {
		dst = append(dst, FieldDegraded, "1")
	}
	if e.Passive {
		dst = append(dst, FieldPassive, "1")
	}
	if e.TraceID.IsValid() {
		dst = append(dst, FieldTraceID, e.TraceID.String())
	}
	if e.SpanID.IsValid() {
		dst = append(dst, FieldSpanID, e.SpanID.String())
	}
	addInt(FieldHeadroom, int64(e.Headroom))
	return dst
}

const (
	flagDegraded = 1 << iota
	flagPassive
)

// AppendPacked appends the binary encoding of e to a batch. prevTS is the TS
// of the previous event in the same batch (0 for the first): timestamps are
// delta-encoded.
func AppendPacked(batch []byte, e *Event, prevTS int64) []byte {
	var flags byte
	if e.Degraded {
		flags |= flagDegraded
	}
	if e.Passive {
		flags |= flagPassive
	}
	batch = append(batch, byte(e.Type), flags)
	for _, s := range [...]string{e.Key, e.Owner, e.Lease, e.Reason, e.Holder, e.By} {
		batch = binary.AppendUvarint(batch, uint64(len(s)))
		batch = append(batch, s...)
	}
	batch = binary.AppendVarint(batch, e.TS-prevTS)
	batch = binary.AppendVarint(batch, int64(e.Wait))
	batch = binary.AppendVarint(batch, int64(e.Hold))
	batch = binary.AppendVarint(batch, e.TTL.Milliseconds())
	batch = binary.AppendVarint(batch, int64(e.Attempts))
	batch = binary.AppendVarint(batch, e.Fence)
	batch = binary.AppendVarint(batch, e.Count)
	return batch
}

// Pack encodes events as one packed batch.
func Pack(events []Event) []byte {
	var b []byte
	var prev int64
	for i := range events {
		b = AppendPacked(b, &events[i], prev)
		prev = events[i].TS
	}
	return b
}

// PackedFields returns the field/value pairs of a packed entry holding n
// events encoded in batch, without optional fields (see PackedEntry).
func PackedFields(n int, batch []byte) []any {
	return []any{FieldVersion, "1", FieldCount, strconv.Itoa(n), FieldBatch, batch}
}

// PackedEntry returns the field/value pairs of a packed entry holding n
// events encoded in batch, with their optional fields encoded in ext (see
// AppendExt); an empty ext adds no field.
func PackedEntry(n int, batch, ext []byte) []any {
	f := PackedFields(n, batch)
	if len(ext) > 0 {
		f = append(f, FieldExt, ext)
	}
	return f
}

// PackAll encodes events as one packed batch and the extension holding
// their optional fields (nil when none has any).
func PackAll(events []Event) (batch, ext []byte) {
	var prev int64
	for i := range events {
		batch = AppendPacked(batch, &events[i], prev)
		ext = AppendExt(ext, i, &events[i])
		prev = events[i].TS
	}
	return batch, ext
}

// Decode decodes one stream entry (as go-redis returns it: values are strings)
// into events. It is DecodeAppend with a nil destination.
func Decode(values map[string]any) ([]Event, error) {
	return DecodeAppend(nil, values)
}

// DecodeAppend appends the events of one stream entry to dst. Unknown fields
// are ignored. On error dst is returned unchanged together with an error that
// wraps ErrMalformed, ErrVersion, ErrTooLarge or ErrUnknownType.
//
// Strings in the returned events may share memory with the entry's values;
// callers that keep them for long should clone them (strings.Clone).
func DecodeAppend(dst []Event, values map[string]any) ([]Event, error) {
	get := func(name string) (string, bool) {
		v, ok := values[name]
		if !ok {
			return "", false
		}
		switch s := v.(type) {
		case string:
			return s, true
		case []byte:
			return string(s), true
		}
		return "", false
	}
	vs, ok := get(FieldVersion)
	if !ok {
		return dst, fmt.Errorf("%w: no %q field", ErrMalformed, FieldVersion)
	}
	v, err := strconv.Atoi(vs)
	if err != nil || v < 1 {
		return dst, fmt.Errorf("%w: bad version %.32q", ErrMalformed, vs)
	}
	if v > Version {
		return dst, fmt.Errorf("%w: %d (this build reads up to %d)", ErrVersion, v, Version)
	}
	if batch, ok := get(FieldBatch); ok {
		ns, _ := get(FieldCount)
		n, err := strconv.Atoi(ns)
		if err != nil || n < 0 {
			return dst, fmt.Errorf("%w: bad batch count %.32q", ErrMalformed, ns)
		}
		ext, _ := get(FieldExt)
		return DecodeBatchExt(dst, batch, ext, n)
	}
	e, err := decodeFields(get)
	if err != nil {
		return dst, err
	}
	return append(dst, e), nil
}

func decodeFields(get func(string) (string, bool)) (Event, error) {
	var e Event
	ts, ok := get(FieldType)
	if !ok {
		return e, fmt.Errorf("%w: no %q field", ErrMalformed, FieldType)
	}
	if e.Type = ParseType(ts); e.Type == TypeInvalid {
		return e, fmt.Errorf("%w: %.32q", ErrUnknownType, ts)
	}
	if e.Key, ok = get(FieldKey); !ok {
		return e, fmt.Errorf("%w: no %q field", ErrMalformed, FieldKey)
	}
	e.Owner, _ = get(FieldOwner)
	e.Lease, _ = get(FieldLease)
	e.Reason, _ = get(FieldReason)
	e.Holder, _ = get(FieldHolder)
	e.By, _ = get(FieldBy)
	for _, s := range [...]string{e.Key, e.Owner, e.Lease, e.Reason, e.Holder, e.By} {
		if len(s) > MaxStringLen {
			return e, fmt.Errorf("%w: field of %d bytes (max %d)", ErrTooLarge, len(s), MaxStringLen)
		}
	}
	ints := [...]struct {
		name string
		dst  *int64
	}{{FieldTS, &e.TS}, {FieldFence, &e.Fence}, {FieldCountN, &e.Count}}
	for _, f := range ints {
		if s, ok := get(f.name); ok {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return e, fmt.Errorf("%w: field %q: %.32q is not an integer", ErrMalformed, f.name, s)
			}
			*f.dst = n
		}
	}
	durs := [...]struct {
		name string
		unit time.Duration
		dst  *time.Duration
	}{{FieldWait, time.Nanosecond, &e.Wait}, {FieldHold, time.Nanosecond, &e.Hold}, {FieldTTL, time.Millisecond, &e.TTL}}
	for _, f := range durs {
		if s, ok := get(f.name); ok {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil || n < 0 || n > math.MaxInt64/int64(f.unit) {
				return e, fmt.Errorf("%w: field %q: %.32q is not a non-negative duration", ErrMalformed, f.name, s)
			}
			*f.dst = time.Duration(n) * f.unit
		}
	}
	if s, ok := get(FieldAttempts); ok {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return e, fmt.Errorf("%w: field %q: %.32q is not a non-negative integer", ErrMalformed, FieldAttempts, s)
		}
		e.Attempts = n
	}
	if s, _ := get(FieldDegraded); s == "1" || s == "true" {
		e.Degraded = true
	}
	if s, _ := get(FieldPassive); s == "1" || s == "true" {
		e.Passive = true
	}
	// Trace ids are advisory: one that does not parse is left out, and the
	// lock step it came with is kept.
	if s, ok := get(FieldTraceID); ok {
		e.TraceID, _ = ParseTraceID(s)
	}
	if s, ok := get(FieldSpanID); ok {
		e.SpanID, _ = ParseSpanID(s)
	}
	if s, ok := get(FieldHeadroom); ok {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			return e, fmt.Errorf("%w: field %q: %.32q is not a non-negative duration", ErrMalformed, FieldHeadroom, s)
		}
		e.Headroom = time.Duration(n)
	}
	if e.TS <= 0 {
		return e, fmt.Errorf("%w: missing or non-positive %q", ErrMalformed, FieldTS)
	}
	return e, nil
}

// DecodeBatch appends the n events of a packed batch to dst. On error dst is
// returned unchanged: a batch is applied whole or not at all.
func DecodeBatch(dst []Event, batch string, n int) ([]Event, error) {
	if n > MaxBatchEvents || len(batch) > MaxBatchBytes {
		return dst, fmt.Errorf("%w: %d events in %d bytes (max %d events, %d bytes)", ErrTooLarge, n, len(batch), MaxBatchEvents, MaxBatchBytes)
	}
	orig := dst
	d := decoder{s: batch}
	var prev int64
	for i := 0; i < n; i++ {
		var e Event
		if err := d.event(&e, prev); err != nil {
			return orig, fmt.Errorf("%w: event %d of %d: %v", ErrMalformed, i, n, err)
		}
		if !e.Type.Valid() {
			return orig, fmt.Errorf("%w: event %d of %d: type %d", ErrUnknownType, i, n, e.Type)
		}
		prev = e.TS
		dst = append(dst, e)
	}
	if d.i != len(d.s) {
		return orig, fmt.Errorf("%w: %d trailing bytes after %d events", ErrMalformed, len(d.s)-d.i, n)
	}
	return dst, nil
}

type decoder struct {
	s   string
	i   int
	err error
}

var errShort = errors.New("truncated")

func (d *decoder) byte() byte {
	if d.err != nil {
		return 0
	}
	if d.i >= len(d.s) {
		d.err = errShort
		return 0
	}
	b := d.s[d.i]
	d.i++
	return b
}

// uvarint reads one unsigned varint. Most of an event's numbers and string
// lengths are a single byte: that case is a bounds check and a compare
// (the decoder's time went to checking d.err byte by byte).
func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	if d.i < len(d.s) && d.s[d.i] < 0x80 {
		b := d.s[d.i]
		d.i++
		return uint64(b)
	}
	var x uint64
	var s uint
	for j := 0; j < binary.MaxVarintLen64; j++ {
		if d.i >= len(d.s) {
			d.err = errShort
			return 0
		}
		b := d.s[d.i]
		d.i++
		if b < 0x80 {
			if j == binary.MaxVarintLen64-1 && b > 1 {
				d.err = errors.New("varint overflows 64 bits")
				return 0
			}
			return x | uint64(b)<<s
		}
		x |= uint64(b&0x7f) << s
		s += 7
	}
	d.err = errors.New("varint overflows 64 bits")
	return 0
}

func (d *decoder) varint() int64 {
	ux := d.uvarint()
	x := int64(ux >> 1)
	if ux&1 != 0 {
		x = ^x
	}
	return x
}

func (d *decoder) str() string {
	n := d.uvarint()
	if d.err != nil {
		return ""
	}
	if n > MaxStringLen {
		d.err = fmt.Errorf("string of %d bytes (max %d)", n, MaxStringLen)
		return ""
	}
	if uint64(len(d.s)-d.i) < n {
		d.err = errShort
		return ""
	}
	s := d.s[d.i : d.i+int(n)]
	d.i += int(n)
	return s
}

func (d *decoder) event(e *Event, prevTS int64) error {
	e.Type = Type(d.byte())
	flags := d.byte()
	e.Degraded = flags&flagDegraded != 0
	e.Passive = flags&flagPassive != 0
	e.Key = d.str()
	e.Owner = d.str()
	e.Lease = d.str()
	e.Reason = d.str()
	e.Holder = d.str()
	e.By = d.str()
	e.TS = prevTS + d.varint()
	e.Wait = time.Duration(d.varint())
	e.Hold = time.Duration(d.varint())
	ttl := d.varint()
	if ttl < 0 || ttl > math.MaxInt64/int64(time.Millisecond) {
		return errors.New("ttl negative or overflows")
	}
	e.TTL = time.Duration(ttl) * time.Millisecond
	e.Attempts = int(d.varint())
	e.Fence = d.varint()
	e.Count = d.varint()
	if d.err != nil {
		return d.err
	}
	if e.Wait < 0 || e.Hold < 0 || e.TTL < 0 || e.Attempts < 0 || e.Count < 0 {
		return errors.New("negative duration or count")
	}
	return nil
}
