package collector

import (
	"encoding/base64"
	"unicode/utf8"

	"github.com/lockscope/lockscope/collector/state"
)

// What one incident record may cost. Its keys, owners and detail come from
// events, which any writer of the stream chooses: without a byte budget 50
// keys of 512 bytes and 20 owners of 256 made a record of 42 kB and the
// history 42 MB. A record is clipped to these budgets when it is queued
// (so the queue is bounded too) and again by incidents.lua when it merges
// into the stored one (so a merge of two full records, or a record stored
// by something else, stays within them).
//
// Budgets are in bytes of the stored JSON, where keys, owners and the
// detail are base64: an entry costs its base64 length plus 3 (quotes and a
// comma), the measure the script applies too. The record's other fields
// (kind, times, ended_by, count, an overlap's cause and refusal counts:
// their names included) take under 250 bytes, so a stored record stays
// under incidentRecordMax, and the history,
// at most IncidentOptions.Max + Max/4 records, under that many times
// incidentRecordMax: 1 250 × 4 KiB = 5 MiB by default.
const (
	incidentRecordMax  = 4096 // bytes of one stored record, at most
	incidentKeysBytes  = 2048 // the keys' budget: keys past it are not listed (Count still counts them)
	incidentOwnerBytes = 1024 // the owners' budget
	incidentDetailMax  = 512  // bytes of the detail (raw), cut at a rune boundary
	incidentWordMax    = 32   // bytes of kind, ended_by and an overlap's cause, which are ours: longer ones are not
	// incidentLeasesBytes is an overlap's leases' budget: its two holds'
	// lease ids (16 hex digits each from our libraries).
	incidentLeasesBytes = 256
)

// listCost is what an entry of s costs in a stored record's keys or owners.
func listCost(s string) int { return base64.StdEncoding.EncodedLen(len(s)) + 3 }

// clipIncident returns in within the record budgets: the keys and owners
// that fit, in order; the detail cut. The caps on how many
// (state.MaxIncidentKeys, MaxIncidentOwners) apply as well.
func clipIncident(in state.Incident) state.Incident {
	in.Keys = clipList(in.Keys, state.MaxIncidentKeys, incidentKeysBytes)
	in.Owners = clipList(in.Owners, state.MaxIncidentOwners, incidentOwnerBytes)
	in.Leases = clipList(in.Leases, state.MaxIncidentOwners, incidentLeasesBytes)
	if len(in.Detail) > incidentDetailMax {
		cut := incidentDetailMax
		if utf8.ValidString(in.Detail) {
			for cut > 0 && !utf8.RuneStart(in.Detail[cut]) {
				cut--
			}
		}
		in.Detail = in.Detail[:cut]
	}
	if len(in.EndedBy) > incidentWordMax {
		in.EndedBy = ""
	}
	if len(in.Cause) > incidentWordMax {
		in.Cause = ""
	}
	return in
}

// clipList returns the first entries of l that fit in n entries and budget
// bytes; entries that do not fit are skipped, so a shorter one after a long
// one still gets in. l itself is not modified.
func clipList(l []string, n, budget int) []string {
	used, fits := 0, 0
	for _, s := range l {
		used += listCost(s)
		fits++
		if used > budget || fits > n {
			break
		}
	}
	if used <= budget && fits <= n {
		return l
	}
	out := make([]string, 0, min(len(l), n))
	used = 0
	for _, s := range l {
		if len(out) == n {
			break
		}
		if c := listCost(s); used+c <= budget {
			out = append(out, s)
			used += c
		}
	}
	return out
}
