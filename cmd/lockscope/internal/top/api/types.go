package api

import (
	"encoding/base64"
	"time"
)

// The JSON a lockscope serve answers (dashboard/api.go has the
// conventions), as far as lockscope top reads it. Unknown fields are
// ignored, so a newer serve's additions do not break an older client.

// Overview is GET /api/v1/overview.
type Overview struct {
	At               *time.Time `json:"at"`
	AcquireRate      float64    `json:"acquire_rate"`
	ContentionRatio  float64    `json:"contention_ratio"`
	WaitP99          float64    `json:"wait_p99_seconds"`
	Held             int        `json:"held"`
	Waiters          int        `json:"waiters"`
	Stuck            int        `json:"stuck"`
	NoExpiry         int        `json:"no_expiry"`
	Expirations5m    int64      `json:"expirations_5m"`
	ExpiredWorking5m int64      `json:"expired_working_5m"`
	Forced5m         int64      `json:"forced_5m"`
	Failures5m       int64      `json:"failures_5m"`
	LastEvent        *time.Time `json:"last_event"`
	TrackedKeys      int        `json:"tracked_keys"`
	ReadOnly         bool       `json:"read_only"`
	Ingesting        bool       `json:"ingesting"`
	IngestError      string     `json:"ingest_error"`
	// Expirations is nil when the serve does not list them (one older
	// than the field), else the newest expired-while-held locks.
	Expirations []Expiration `json:"expirations"`
}

// Expiration is one lock whose TTL lapsed while held.
type Expiration struct {
	Key           string    `json:"key"`
	KeyB64        string    `json:"key_b64"`
	Class         string    `json:"class"`
	Owner         string    `json:"owner"`
	OwnerB64      string    `json:"owner_b64"`
	Lease         string    `json:"lease"`
	At            time.Time `json:"at"`
	Held          float64   `json:"held_seconds"`
	Confirmed     bool      `json:"confirmed"`
	HolderWorking bool      `json:"holder_working"`
}

// RawKey is the key's exact bytes.
func (e Expiration) RawKey() string { return Raw(e.Key, e.KeyB64) }

// LockPage is GET /api/v1/locks.
type LockPage struct {
	Total int        `json:"total"`
	Locks []LockInfo `json:"locks"`
}

// LockInfo is one tracked key.
type LockInfo struct {
	Key        string     `json:"key"`
	KeyB64     string     `json:"key_b64"`
	Class      string     `json:"class"`
	Held       bool       `json:"held"`
	Owner      string     `json:"owner"`
	OwnerB64   string     `json:"owner_b64"`
	Lease      string     `json:"lease"`
	Since      *time.Time `json:"since"`
	HeldFor    float64    `json:"held_for_seconds"`
	TTL        float64    `json:"ttl_seconds"` // -1: no expiry
	NoExpiry   bool       `json:"no_expiry"`
	ExpiresAt  *time.Time `json:"expires_at"`
	Fence      int64      `json:"fence"`
	Waiters    int        `json:"waiters"`
	Stuck      bool       `json:"stuck"`
	StuckAfter float64    `json:"stuck_after_seconds"`
	Degraded   bool       `json:"degraded"`
	Passive    bool       `json:"passive"`

	Acquisitions int64 `json:"acquisitions"`
	Contentions  int64 `json:"contentions"`
	Failures     int64 `json:"failures"`
}

// RawKey is the key's exact bytes.
func (l LockInfo) RawKey() string { return Raw(l.Key, l.KeyB64) }

// HotKeys is GET /api/v1/hotkeys.
type HotKeys struct {
	Window string   `json:"window"`
	By     string   `json:"by"`
	Keys   []HotKey `json:"keys"`
}

// HotKey is one of the most contended keys of the window.
type HotKey struct {
	Key          string   `json:"key"`
	KeyB64       string   `json:"key_b64"`
	Class        string   `json:"class"`
	Contentions  *int64   `json:"contentions"`  // nil: unknown (a watched key)
	Wait         *float64 `json:"wait_seconds"` // nil: unknown (a watched key)
	Acquisitions int64    `json:"acquisitions"`
}

// RawKey is the key's exact bytes.
func (h HotKey) RawKey() string { return Raw(h.Key, h.KeyB64) }

// Blocking is GET /api/v1/blocking: who waits on whom now.
type Blocking struct {
	At        time.Time          `json:"at"`
	Waiters   int                `json:"waiters"`
	Holders   []BlockingHolder   `json:"holders"`
	Chains    []Chain            `json:"chains"`
	Deadlocks [][]DeadlockMember `json:"deadlocks"`
}

// BlockingHolder is a holder that others wait for.
type BlockingHolder struct {
	Key         string     `json:"key"`
	KeyB64      string     `json:"key_b64"`
	Class       string     `json:"class"`
	Owner       string     `json:"owner"`
	OwnerB64    string     `json:"owner_b64"`
	Lease       string     `json:"lease"`
	Since       *time.Time `json:"since"`
	Waiters     int        `json:"waiters"`
	WaitSeconds float64    `json:"wait_seconds"`
	WaitsToo    bool       `json:"holder_waits_too"`
}

// RawKey is the key's exact bytes.
func (h BlockingHolder) RawKey() string { return Raw(h.Key, h.KeyB64) }

// Chain is one waiting chain: each link's caller waits for the key the
// next link holds; the last link holds and does not wait.
type Chain struct {
	Links []ChainLink `json:"links"`
	Cycle bool        `json:"cycle"`
}

// ChainLink is one caller of a chain.
type ChainLink struct {
	Owner    string     `json:"owner"`
	OwnerB64 string     `json:"owner_b64"`
	Lease    string     `json:"lease"`
	WaitsFor *string    `json:"waits_for"` // nil: the holder at the end of the chain
	Since    *time.Time `json:"since"`
}

// DeadlockMember is one caller of a wait-for cycle: it holds one key and
// waits for another that the cycle's next member holds.
type DeadlockMember struct {
	Owner    string    `json:"owner"`
	OwnerB64 string    `json:"owner_b64"`
	Lease    string    `json:"lease"`
	Holds    string    `json:"holds"`
	WaitsFor string    `json:"waits_for"`
	Since    time.Time `json:"waiting_since"`
}

// Incidents is GET /api/v1/incidents.
type Incidents struct {
	Incidents []Incident `json:"incidents"`
}

// Incident is one entry of the shared incident history.
type Incident struct {
	ID      string     `json:"id"`
	Kind    string     `json:"kind"`
	Keys    []string   `json:"keys"`
	KeysB64 []string   `json:"keys_b64"`
	Owners  []string   `json:"owners"`
	Start   time.Time  `json:"start"`
	End     *time.Time `json:"end"` // nil while open
	EndedBy string     `json:"ended_by"`
	Detail  string     `json:"detail"`
	Count   int        `json:"count"`
}

// RawKeys are the incident's keys' exact bytes.
func (in Incident) RawKeys() []string {
	if len(in.KeysB64) != len(in.Keys) {
		return in.Keys
	}
	out := make([]string, len(in.Keys))
	for i := range in.Keys {
		out[i] = Raw(in.Keys[i], in.KeysB64[i])
	}
	return out
}

// LockDetail is GET /api/v1/locks/{key}.
type LockDetail struct {
	LockInfo
	Tracked     bool      `json:"tracked"`
	Redis       *Holder   `json:"redis_holder"` // nil: not held in Redis
	RedisError  string    `json:"redis_error"`
	RedisHidden bool      `json:"redis_hidden"` // Redis holds a value shown to operators only
	Recent      []Event   `json:"recent"`
	WaitersNow  []Waiter  `json:"waiters_now"`
	Semaphore   *struct{} `json:"semaphore"` // set for a Redisson semaphore: no lock to release
}

// Holder is the holder Redis has now. Fingerprint is set for operators
// only: a forced release must quote it.
type Holder struct {
	Owner       string     `json:"owner"`
	OwnerB64    string     `json:"owner_b64"`
	Lease       string     `json:"lease"`
	Fence       int64      `json:"fence"`
	TTL         float64    `json:"ttl_seconds"` // -1: no expiry
	NoExpiry    bool       `json:"no_expiry"`
	Since       *time.Time `json:"since"`
	Fingerprint string     `json:"fingerprint"`
	Foreign     bool       `json:"foreign"`
	Degraded    bool       `json:"degraded"`
}

// Waiter is a caller waiting for the key now.
type Waiter struct {
	Owner    string     `json:"owner"`
	OwnerB64 string     `json:"owner_b64"`
	Lease    string     `json:"lease"`
	Holder   string     `json:"holder_seen"`
	Since    time.Time  `json:"since"`
	Waiting  float64    `json:"waiting_seconds"`
	Deadline *time.Time `json:"deadline"` // nil: not known
	Holds    []string   `json:"holds_leases"`
}

// Event is one of a key's recent events.
type Event struct {
	Type     string    `json:"type"`
	Owner    string    `json:"owner"`
	Lease    string    `json:"lease"`
	At       time.Time `json:"at"`
	Wait     float64   `json:"wait_seconds"`
	Hold     float64   `json:"hold_seconds"`
	TTL      float64   `json:"ttl_seconds"`
	Attempts int       `json:"attempts"`
	Reason   string    `json:"reason"`
	Holder   string    `json:"holder"`
	By       string    `json:"by"`
}

// ReleaseResult is POST /api/v1/locks/{key}/release's answer.
type ReleaseResult struct {
	Released bool    `json:"released"`
	Error    string  `json:"error"`
	By       string  `json:"by"`
	Reason   string  `json:"reason"`
	Previous *Holder `json:"previous"` // the holder that was released
	Current  *Holder `json:"current"`  // the holder now, when the owner changed
}

// AskResult is POST /api/v1/locks/{key}/ask's answer, as far as a
// client needs it: the request was recorded.
type AskResult struct {
	Error   string  `json:"error"`
	Grace   float64 `json:"grace_seconds"`
	Current *Holder `json:"current"` // the holder now, when the owner changed
}

// Raw is a string field's exact bytes: its "_b64" companion decoded when
// the serve sent one (the string was not valid UTF-8), else s.
func Raw(s, b64 string) string {
	if b64 == "" {
		return s
	}
	b, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return s
	}
	return string(b)
}
