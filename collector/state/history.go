package state

// The most recent expirations and forced releases, kept for the overview.

// expRing keeps the most recent expirations.
type expRing struct {
	buf  [ringLen]Expiration
	seq  [ringLen]uint64
	next uint64 // sequence of the next entry; sequences start at 1
}

func (r *expRing) add(e Expiration) uint64 {
	r.next++
	i := r.next % ringLen
	r.buf[i], r.seq[i] = e, r.next
	return r.next
}

func (r *expRing) confirm(seq uint64) {
	if i := seq % ringLen; seq != 0 && r.seq[i] == seq {
		r.buf[i].Confirmed = true
	}
}

// holderWorking marks the entry seq as expired under a working holder; it
// reports whether it was not marked yet.
func (r *expRing) holderWorking(seq uint64) bool {
	i := seq % ringLen
	if seq == 0 || r.seq[i] != seq || r.buf[i].HolderWorking {
		return false
	}
	r.buf[i].HolderWorking = true
	return true
}

// newest returns up to n entries, newest first.
func (r *expRing) newest(n int) []Expiration {
	n = min(n, int(min(r.next, ringLen)))
	out := make([]Expiration, 0, max(n, 0))
	for s := r.next; len(out) < n; s-- {
		out = append(out, r.buf[s%ringLen])
	}
	return out
}

// forcedRing keeps the most recent forced releases.
type forcedRing struct {
	buf  [ringLen]ForcedRelease
	next uint64
}

func (r *forcedRing) add(f ForcedRelease) {
	r.next++
	r.buf[r.next%ringLen] = f
}

func (r *forcedRing) newest(n int) []ForcedRelease {
	n = min(n, int(min(r.next, ringLen)))
	out := make([]ForcedRelease, 0, max(n, 0))
	for s := r.next; len(out) < n; s-- {
		out = append(out, r.buf[s%ringLen])
	}
	return out
}
