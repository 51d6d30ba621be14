package event

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// The extension of a packed entry (field "x") carries the optional fields
// of its events: what was added to schema version 1 after the packed layout
// was fixed. A collector that predates it ignores the field, as it ignores
// any unknown field, and decodes the batch as before; so an emitter may send
// it to any collector of version 1.
//
// The extension is a sequence of records, one per event that has optional
// fields, in increasing event order:
//
//	uvarint index   the event's position in the batch (0-based, < n)
//	uvarint length  the length of the items that follow
//	items           each: uvarint tag, uvarint length, that many bytes
//
// Items of unknown tags are skipped, so later fields can be added the same
// way. An item of a known tag with the wrong length is ignored (optional
// fields never cost the lock step they came with); a record that is cut
// short, out of order or beyond the batch makes the entry malformed.

// Extension item tags.
const (
	extTraceID  = 1 // 16 bytes
	extSpanID   = 2 // 8 bytes
	extHeadroom = 3 // uvarint nanoseconds
)

// AppendExt appends to ext the extension record of event i of a batch, if e
// has optional fields (HasExt); otherwise ext is returned unchanged. Records
// must be appended in increasing i.
func AppendExt(ext []byte, i int, e *Event) []byte {
	if !e.HasExt() {
		return ext
	}
	var items [48]byte
	b := items[:0]
	if e.TraceID.IsValid() {
		b = append(b, extTraceID, byte(len(e.TraceID)))
		b = append(b, e.TraceID[:]...)
	}
	if e.SpanID.IsValid() {
		b = append(b, extSpanID, byte(len(e.SpanID)))
		b = append(b, e.SpanID[:]...)
	}
	if e.Headroom > 0 {
		var v [binary.MaxVarintLen64]byte
		n := binary.PutUvarint(v[:], uint64(e.Headroom))
		b = append(b, extHeadroom, byte(n))
		b = append(b, v[:n]...)
	}
	ext = binary.AppendUvarint(ext, uint64(i))
	ext = binary.AppendUvarint(ext, uint64(len(b)))
	return append(ext, b...)
}

// DecodeBatchExt is DecodeBatch for a packed entry with an extension (ext
// may be empty): the events' optional fields are set from it.
func DecodeBatchExt(dst []Event, batch, ext string, n int) ([]Event, error) {
	if len(ext) > MaxBatchBytes {
		return dst, fmt.Errorf("%w: extension of %d bytes (max %d)", ErrTooLarge, len(ext), MaxBatchBytes)
	}
	orig := dst
	out, err := DecodeBatch(dst, batch, n)
	if err != nil || ext == "" {
		return out, err
	}
	if err := applyExt(out[len(orig):], ext); err != nil {
		return orig, fmt.Errorf("%w: extension: %v", ErrMalformed, err)
	}
	return out, nil
}

var errExtOrder = errors.New("record out of order or beyond the batch")

func applyExt(evs []Event, ext string) error {
	d := decoder{s: ext}
	next := 0 // the lowest index the next record may have
	for d.i < len(d.s) {
		i := d.uvarint()
		l := d.uvarint()
		if d.err != nil {
			return d.err
		}
		if i < uint64(next) || i >= uint64(len(evs)) {
			return errExtOrder
		}
		if l > uint64(len(d.s)-d.i) {
			return errShort
		}
		e := &evs[i]
		rec := decoder{s: d.s[d.i : d.i+int(l)]}
		d.i += int(l)
		next = int(i) + 1
		for rec.i < len(rec.s) {
			tag := rec.uvarint()
			v := rec.str()
			if rec.err != nil {
				return rec.err
			}
			switch tag {
			case extTraceID:
				if len(v) == len(e.TraceID) {
					copy(e.TraceID[:], v)
				}
			case extSpanID:
				if len(v) == len(e.SpanID) {
					copy(e.SpanID[:], v)
				}
			case extHeadroom:
				if x, k := binary.Uvarint([]byte(v)); k == len(v) && x <= 1<<63-1 {
					e.Headroom = time.Duration(x)
				}
			}
		}
	}
	return nil
}
