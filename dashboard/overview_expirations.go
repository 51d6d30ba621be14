package dashboard

import (
	"time"

	"github.com/lockscope/lockscope/internal/keytext"
)

// apiExpiration is one recently expired lock as GET /api/v1/overview lists
// it in "expirations": the overview page's "Recently expired" card, so a
// client of the API (lockscope top) shows what the page shows.
type apiExpiration struct {
	Key      string    `json:"key"`
	KeyB64   string    `json:"key_b64,omitempty"`
	Class    string    `json:"class"`
	Owner    string    `json:"owner"`
	OwnerB64 string    `json:"owner_b64,omitempty"`
	Lease    string    `json:"lease,omitempty"`
	At       time.Time `json:"at"`
	Held     float64   `json:"held_seconds"`
	// Confirmed: a keyspace notification confirmed the expiry.
	Confirmed bool `json:"confirmed"`
	// HolderWorking: the holder was still at work after its lock expired,
	// so it and the next holder may have run at once; false: it has said
	// nothing since (it died, or hangs).
	HolderWorking bool   `json:"holder_working"`
	Href          string `json:"href"`
}

// apiExpirations is the overview's newest expirations, newest first, as
// many as the page shows.
func (s *server) apiExpirations() []apiExpiration {
	out := []apiExpiration{}
	for _, e := range s.q.Expirations(expirationsRows) {
		out = append(out, apiExpiration{
			Key: e.Key, KeyB64: keytext.B64IfInvalid(e.Key), Class: e.Class,
			Owner: e.Owner, OwnerB64: keytext.B64IfInvalid(e.Owner), Lease: e.Lease,
			At: e.At.UTC(), Held: seconds(e.Held), Confirmed: e.Confirmed, HolderWorking: e.HolderWorking,
			Href: apiLockPath(e.Key),
		})
	}
	return out
}
