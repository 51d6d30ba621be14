package state

import (
	"encoding/binary"
	"slices"
	"strings"
	"time"

	"github.com/lockscope/lockscope/event"
)

// A key's recent events are kept as one byte slice of varint-encoded
// records, oldest first, grown on demand: about 30 bytes per event where an
// event.Event is 168 and a struct of its fields with string headers 104
// (16 more for an event with a trace id: the one optional field kept).
// Owners, reasons and holders are stored as ids of the aggregator's intern
// table (two bytes), lease ids inline.
//
// The ring also stands in for the key's distributions and series while it
// holds every event the key has seen: each record carries the observations
// its event made (a wait, an acquisition, a hold), and keyStats (288 bytes)
// is built by replaying them only when a record with observations would
// leave the ring, or when an observation has no record to ride on (see
// observe). A key seen a few times, the bulk of a stream of distinct keys,
// never allocates one.

// record is one event of a key's ring, decoded. A record of a traced event
// carries its trace id in 16 more bytes (recTrace); the span id is not
// kept.
type record struct {
	ts       int64
	at       int64 // collector clock when applied: set with obsWait or obsAcq
	d        int64 // wait (acquired, failed), hold (released, lost, expired, forced), ttl (renewed)
	hold     int64 // the observed hold when it differs from d (obsHoldAt)
	fence    int64
	headroom int64 // renewed: the TTL left when it landed (ns; 0 unknown)
	ttlMS    int32 // acquired: the TTL set
	attempts int32
	typ      event.Type
	flags    uint8 // rec*
	obs      uint8 // obs*: what the event added to the key's figures
	owner    ref
	lease    ref
	reason   ref
	who      ref // waiting, failed: the holder seen; forced, requested: the operator
	trace    event.TraceID
}

// ref is a string of a record: an intern table id, or the string itself.
type ref struct {
	s  string
	id uint32 // 1 + index in the intern table; 0 means s is stored inline
}

const (
	recDegraded = 1 << iota
	recPassive
	recTrace // the trace id follows the header
)

const (
	obsWait   = 1 << iota // d was a wait, ended at at
	obsAcq                // an acquisition counted at at
	obsHold               // d was a hold (or hold, with obsHoldAt)
	obsHoldAt             // the hold observed is in hold, not d
)

func (r *record) event(key string, tab *internTab) event.Event {
	e := event.Event{
		Type: r.typ, Key: key, Owner: tab.str(r.owner), Lease: r.lease.s, TS: r.ts, Attempts: int(r.attempts),
		Fence: r.fence, Reason: tab.str(r.reason), Degraded: r.flags&recDegraded != 0, Passive: r.flags&recPassive != 0,
		TraceID: r.trace,
	}
	d := time.Duration(r.d)
	switch r.typ {
	case event.Acquired:
		e.Wait, e.TTL = d, time.Duration(r.ttlMS)*time.Millisecond
	case event.Waiting:
		e.Holder = tab.str(r.who)
	case event.Failed:
		e.Wait, e.Holder = d, tab.str(r.who)
	case event.Renewed:
		e.TTL, e.Headroom = d, time.Duration(r.headroom)
	case event.Dropped:
		e.Count = r.d
	case event.Forced:
		e.Hold, e.By = d, tab.str(r.who)
	case event.Requested:
		e.Wait, e.By, e.Count, e.Attempts = d, tab.str(r.who), int64(r.attempts), 0
	default:
		e.Hold = d
	}
	return e
}

// replay adds r's observations to s.
func (r *record) replay(s *keyStats) {
	if r.obs&obsWait != 0 {
		s.wait.add(time.Duration(r.d))
	}
	if r.obs&obsAcq != 0 {
		s.addAcquisition(r.at)
	}
	if r.obs&obsHold != 0 {
		h := r.d
		if r.obs&obsHoldAt != 0 {
			h = r.hold
		}
		s.hold.add(time.Duration(h))
	}
}

// appendRecord encodes r, its timestamp relative to base.
func appendRecord(b []byte, r *record, base int64) []byte {
	if r.trace.IsValid() {
		b = append(b, byte(r.typ), r.flags|recTrace, r.obs)
		b = append(b, r.trace[:]...)
	} else {
		b = append(b, byte(r.typ), r.flags&^recTrace, r.obs)
	}
	b = binary.AppendVarint(b, r.ts-base)
	if r.obs&(obsWait|obsAcq) != 0 {
		b = binary.AppendVarint(b, r.at-r.ts)
	}
	b = binary.AppendVarint(b, r.d)
	if r.obs&obsHoldAt != 0 {
		b = binary.AppendVarint(b, r.hold)
	}
	switch r.typ {
	case event.Acquired:
		b = binary.AppendVarint(b, int64(r.ttlMS))
	case event.Renewed:
		b = binary.AppendVarint(b, r.headroom)
	}
	b = binary.AppendVarint(b, int64(r.attempts))
	b = binary.AppendVarint(b, r.fence)
	for _, s := range [...]*ref{&r.owner, &r.lease, &r.reason, &r.who} {
		if s.id != 0 {
			b = binary.AppendUvarint(b, uint64(s.id-1)<<1|1)
			continue
		}
		b = binary.AppendUvarint(b, uint64(len(s.s))<<1)
		b = append(b, s.s...)
	}
	return b
}

// maxRecordLen bounds the length of r encoded.
func maxRecordLen(r *record) int {
	const fixed = 3 + len(event.TraceID{}) + 7*binary.MaxVarintLen64 + 4*binary.MaxVarintLen32
	n := fixed
	for _, s := range [...]*ref{&r.owner, &r.lease, &r.reason, &r.who} {
		if s.id == 0 {
			n += len(s.s)
		}
	}
	return n
}

// decodeRecord decodes the record at the start of b into r and returns its
// length. Inline strings are copied only if strs is set. b was written by
// appendRecord, so it is not checked.
func decodeRecord(b []byte, base int64, r *record, strs bool) int {
	r.typ, r.flags, r.obs = event.Type(b[0]), b[1]&^recTrace, b[2]
	i := 3
	r.trace = event.TraceID{}
	if b[1]&recTrace != 0 {
		i += copy(r.trace[:], b[i:])
	}
	var v int64
	v, i = varintAt(b, i)
	r.ts = base + v
	r.at, r.hold, r.ttlMS, r.headroom = 0, 0, 0, 0
	if r.obs&(obsWait|obsAcq) != 0 {
		v, i = varintAt(b, i)
		r.at = r.ts + v
	}
	r.d, i = varintAt(b, i)
	if r.obs&obsHoldAt != 0 {
		r.hold, i = varintAt(b, i)
	}
	switch r.typ {
	case event.Acquired:
		v, i = varintAt(b, i)
		r.ttlMS = int32(v)
	case event.Renewed:
		r.headroom, i = varintAt(b, i)
	}
	v, i = varintAt(b, i)
	r.attempts = int32(v)
	r.fence, i = varintAt(b, i)
	for _, s := range [...]*ref{&r.owner, &r.lease, &r.reason, &r.who} {
		tag, n := binary.Uvarint(b[i:])
		i += n
		if tag&1 != 0 {
			*s = ref{id: uint32(tag>>1) + 1}
			continue
		}
		l := int(tag >> 1)
		*s = ref{}
		if strs && l > 0 {
			s.s = string(b[i : i+l])
		}
		i += l
	}
	return i
}

func varintAt(b []byte, i int) (int64, int) {
	v, n := binary.Varint(b[i:])
	return v, i + n
}

// skipRecord returns the length of the record at the start of b and the
// observations it carries, without decoding it.
func skipRecord(b []byte) (int, uint8) {
	typ, obs := event.Type(b[0]), b[2]
	varints := 4 // ts, d, attempts, fence
	i := 3
	if b[1]&recTrace != 0 {
		i += len(event.TraceID{})
	}
	if obs&(obsWait|obsAcq) != 0 {
		varints++
	}
	if obs&obsHoldAt != 0 {
		varints++
	}
	if typ == event.Acquired || typ == event.Renewed {
		varints++
	}
	for ; varints > 0; i++ {
		if b[i] < 0x80 {
			varints--
		}
	}
	for range 4 {
		tag, n := binary.Uvarint(b[i:])
		i += n
		if tag&1 == 0 {
			i += int(tag >> 1)
		}
	}
	return i, obs
}

// pushLocked appends r to k's ring. Records past Config.RecentEvents are
// dropped in batches, when the buffer is full (or holds twice the count),
// not one per push: reading the oldest record is a cache miss of its own.
// Until then they stay in the buffer, unseen by newest; their observations
// still count. A dropped record's observations must not be lost: the first
// time one would be, the key's figures move to keyStats.
//
// The buffer never grows past maxRingBytes: records with long strings
// (a hostile stream's) leave fewer in the ring, oldest first, rather than
// make the key cost more.
func (a *Aggregator) pushLocked(k *keyState, r *record) {
	limit := a.cfg.RecentEvents
	if k.recN == 0 {
		k.recent, k.recOff, k.recBase = k.recent[:0], 0, r.ts
	}
	if int(k.recN) < 2*limit && cap(k.recent)-len(k.recent) >= maxRecordLen(r) {
		k.recent = appendRecord(k.recent, r, k.recBase)
		k.recN++
		return
	}
	a.scratch = appendRecord(a.scratch[:0], r, k.recBase)
	if len(k.recent)+len(a.scratch) > cap(k.recent) || int(k.recN) >= 2*limit {
		off := int(k.recOff)
		for excess := int(k.recN) - (limit - 1); excess > 0; excess-- {
			off = a.dropOldestLocked(k, off)
		}
		for k.recN > 0 && len(k.recent)-off+len(a.scratch) > maxRingBytes {
			off = a.dropOldestLocked(k, off)
		}
		live := k.recent[off:]
		need := len(live) + len(a.scratch)
		switch {
		case need <= cap(k.recent)-off:
			k.recOff = int32(off)
		case off > 0 && need <= cap(k.recent)*3/4:
			// Reclaim the space of dropped records: at least a quarter of
			// the buffer is then free, so copies stay amortised O(1).
			k.recent, k.recOff = k.recent[:copy(k.recent, live)], 0
		default:
			// Most keys see a few events: grow to fit for the first
			// ones, then by a quarter while the ring fills, by half once
			// it drops records. slices.Grow rounds up to the
			// allocator's size class, which make would hide.
			c := need
			switch {
			case int(k.recN) >= limit-1:
				c += need / 2
			case k.recN >= 4:
				c += need / 4
			}
			buf := slices.Grow([]byte(nil), min(c, maxRingBytes))
			if cap(buf) > maxRingBytes {
				buf = buf[:0:maxRingBytes]
			}
			k.recent, k.recOff = append(buf, live...), 0
		}
	}
	k.recent = append(k.recent, a.scratch...)
	k.recN++
}

// maxRingBytes bounds a key's ring buffer. A record of the library's
// events takes some 30 bytes, so the default 32 events fit several times
// over; one with every string at its limit (limits.go) takes 1.3 kB.
const maxRingBytes = 4096

// dropOldestLocked drops the oldest record of k's ring, which starts at
// off, and returns where the ring starts then. Its observations move to
// keyStats first, if k has none yet.
func (a *Aggregator) dropOldestLocked(k *keyState, off int) int {
	n, obs := skipRecord(k.recent[off:])
	if obs != 0 && k.stats == nil {
		k.recOff = int32(off)
		a.materializeLocked(k)
	}
	k.recN--
	return off + n
}

// recIter walks a key's ring, oldest first.
type recIter struct {
	b    []byte
	base int64
	left int
}

func (k *keyState) iter() recIter { return recIter{k.recent[k.recOff:], k.recBase, int(k.recN)} }

// next decodes the next record into r; strs as for decodeRecord.
func (it *recIter) next(r *record, strs bool) bool {
	if it.left == 0 {
		return false
	}
	n := decodeRecord(it.b, it.base, r, strs)
	it.b = it.b[n:]
	it.left--
	return true
}

// newest returns the ring's newest n events, newest first.
func (k *keyState) newest(tab *internTab, n int) []event.Event {
	skip := max(int(k.recN)-n, 0)
	out := make([]event.Event, int(k.recN)-skip)
	var r record
	it := k.iter()
	for range skip {
		it.next(&r, false)
	}
	for i := len(out) - 1; i >= 0 && it.next(&r, true); i-- {
		out[i] = r.event(k.key, tab)
	}
	return out
}

// statsView returns k's figures: its keyStats, or a replay of its ring into
// tmp while the ring still holds all of them.
func (k *keyState) statsView(tmp *keyStats) *keyStats {
	if k.stats != nil {
		return k.stats
	}
	*tmp = keyStats{}
	k.replay(tmp)
	return tmp
}

// replay adds the observations of k's ring to s.
func (k *keyState) replay(s *keyStats) {
	var r record
	for it := k.iter(); it.next(&r, false); {
		r.replay(s)
	}
}

// observe adds one observation to k's figures: to keyStats if k has them,
// else to the record of the event being applied (a.rec), from which a
// replay recovers it. If that record cannot carry it (there is none, or it
// already carries one of the kind), k's figures move to keyStats first.
func (a *Aggregator) observe(k *keyState, kind uint8, at int64, d time.Duration) {
	if k.stats == nil {
		r := a.rec
		if r != nil && a.recKey == k && r.obs&kind == 0 {
			switch kind {
			case obsWait, obsAcq:
				if (r.obs&(obsWait|obsAcq) == 0 || r.at == at) && (kind != obsWait || r.d == int64(d)) {
					r.obs |= kind
					r.at = at
					return
				}
			case obsHold:
				r.obs |= obsHold
				if int64(d) != r.d {
					r.obs |= obsHoldAt
					r.hold = int64(d)
				}
				return
			}
		}
		a.materializeLocked(k)
	}
	s := k.stats
	switch kind {
	case obsWait:
		s.wait.add(d)
	case obsAcq:
		s.addAcquisition(at)
	case obsHold:
		s.hold.add(d)
	}
}

// materializeLocked gives k its keyStats, replaying the ring and the
// record being applied (whose observations are then cleared: they are
// counted).
func (a *Aggregator) materializeLocked(k *keyState) {
	s := &keyStats{}
	k.replay(s)
	if r := a.rec; r != nil && a.recKey == k {
		r.replay(s)
		r.obs, r.at, r.hold = 0, 0, 0
	}
	k.stats = s
}

// internTab gives the owners, reasons and holders of records an id, so a
// record stores two bytes instead of a copy or a string header. It is
// bounded (maxInterned); strings beyond it are stored inline.
//
// Writers hold Aggregator.mu. Readers decode records under a shard lock
// and look ids up without Aggregator.mu: an entry and its chunk are
// written before any record holding its id, under that record's shard
// lock, so the shard lock orders them; entries are never changed.
type internTab struct {
	ids    map[string]uint32
	chunks [maxInterned / internChunk]*[internChunk]string
	n      uint32
}

const internChunk = 256

// add returns s's id, adding it if there is room; 0 means no id.
func (t *internTab) add(s string) (string, uint32) {
	if id, ok := t.ids[s]; ok {
		return t.get(id), id
	}
	if t.n == maxInterned {
		return s, 0
	}
	c := t.n / internChunk
	if t.chunks[c] == nil {
		t.chunks[c] = new([internChunk]string)
	}
	t.chunks[c][t.n%internChunk] = s
	t.n++
	t.ids[s] = t.n
	return s, t.n
}

func (t *internTab) get(id uint32) string {
	id--
	return t.chunks[id/internChunk][id%internChunk]
}

// str returns the string of r.
func (t *internTab) str(r ref) string {
	if r.id == 0 {
		return r.s
	}
	return t.get(r.id)
}

// internLocked returns a long-lived copy of s, shared between records and
// with an intern id while the table has room.
func (a *Aggregator) internLocked(s string) ref {
	if s == "" {
		return ref{}
	}
	if id, ok := a.tab.ids[s]; ok {
		return ref{s: a.tab.get(id), id: id}
	}
	v := strings.Clone(s)
	_, id := a.tab.add(v)
	return ref{s: v, id: id}
}
