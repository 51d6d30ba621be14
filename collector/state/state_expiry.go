package state

// expiryHeap orders holds by expiry so Tick finds the lapsed ones without
// scanning every held key. Renewals push a new entry and leave the old one
// in place; a popped entry that no longer matches its key's hold is stale
// and skipped. The heap is rebuilt from the held keys when stale entries
// outnumber live ones, which bounds its size.
type expiryHeap []expiryItem

type expiryItem struct {
	at int64
	k  *keyState
}

// live reports whether it still describes the current hold of the key in
// its slot. An evicted key's slot is zeroed (not held); if another key has
// since taken the slot with a hold expiring at the very same instant, the
// entry serves that hold as well as the hold's own entry would.
func (it expiryItem) live() bool {
	return it.k.held && it.k.expiresAt == it.at
}

func (h *expiryHeap) push(at int64, k *keyState) {
	*h = append(*h, expiryItem{at, k})
	s := *h
	for j := len(s) - 1; j > 0; {
		p := (j - 1) / 2
		if s[p].at <= s[j].at {
			break
		}
		s[p], s[j] = s[j], s[p]
		j = p
	}
}

func (h *expiryHeap) pop() expiryItem {
	s := *h
	top := s[0]
	n := len(s) - 1
	s[0] = s[n]
	s[n] = expiryItem{}
	s = s[:n]
	*h = s
	h.down(0)
	return top
}

func (h expiryHeap) down(j int) {
	n := len(h)
	for {
		l := 2*j + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && h[r].at < h[l].at {
			m = r
		}
		if h[j].at <= h[m].at {
			return
		}
		h[j], h[m] = h[m], h[j]
		j = m
	}
}

// compact drops stale entries and restores the heap order.
func (h *expiryHeap) compact() {
	s := (*h)[:0]
	for _, it := range *h {
		if it.live() {
			s = append(s, it)
		}
	}
	clear((*h)[len(s):])
	*h = s
	for j := len(s)/2 - 1; j >= 0; j-- {
		s.down(j)
	}
}
