// Package scalesim simulates the partition ownership that docs/scaling.md
// proposes for running lockscope past one collector: stream partitions
// assigned to collector replicas by rendezvous (highest random weight)
// hashing, each partition owned by R replicas for availability. It holds
// the assignment rule and the measures the document quotes (balance, and
// how many partitions move when a replica joins or dies); nothing in the
// binary uses it yet. It lives under bench/ with the other measurements the
// documents quote: run it with
//
//	go test -run TestOwnershipSimulation -v ./bench/scalesim/
package scalesim

import (
	"slices"
	"strconv"
)

// Owners returns the r members (in preference order) that own partition p:
// the r members with the highest weight(member, p). Every member computes
// the same answer from the same member list, with no coordination beyond
// agreeing on who is alive; when a member leaves, only the partitions it
// owned get a new owner, and each gets the next member in its own order.
func Owners(members []string, p, r int) []string {
	type mw struct {
		m string
		w uint64
	}
	ws := make([]mw, len(members))
	for i, m := range members {
		ws[i] = mw{m, weight(m, p)}
	}
	slices.SortFunc(ws, func(a, b mw) int {
		switch {
		case a.w > b.w:
			return -1
		case a.w < b.w:
			return 1
		}
		return 0
	})
	r = min(r, len(ws))
	out := make([]string, r)
	for i := range out {
		out[i] = ws[i].m
	}
	return out
}

// weight is a 64-bit FNV-1a of "member/partition", finished with a
// splitmix64 round so that near-equal inputs spread.
func weight(member string, p int) uint64 {
	h := uint64(14695981039346656037)
	for _, c := range []byte(member + "/" + strconv.Itoa(p)) {
		h ^= uint64(c)
		h *= 1099511628211
	}
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}

// Assignment maps each member to the partitions it owns (as any of the r
// owners).
func Assignment(members []string, partitions, r int) map[string][]int {
	out := make(map[string][]int, len(members))
	for p := range partitions {
		for _, m := range Owners(members, p, r) {
			out[m] = append(out[m], p)
		}
	}
	return out
}

// Imbalance is the most partitions any member owns over the mean.
func Imbalance(a map[string][]int, members []string) float64 {
	total, most := 0, 0
	for _, m := range members {
		total += len(a[m])
		most = max(most, len(a[m]))
	}
	if total == 0 {
		return 0
	}
	return float64(most) / (float64(total) / float64(len(members)))
}

// Moved counts the (partition, owner) pairs of after that before did not
// have: the partitions a member must rebuild after a membership change.
func Moved(before, after map[string][]int) int {
	n := 0
	for m, ps := range after {
		had := map[int]bool{}
		for _, p := range before[m] {
			had[p] = true
		}
		for _, p := range ps {
			if !had[p] {
				n++
			}
		}
	}
	return n
}

// Members names n members as a deployment would ("lockscope-0", ...).
func Members(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "lockscope-" + strconv.Itoa(i)
	}
	return out
}
