package redisson

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/lock"
)

// Listeners returns how many connections listen for h's release requests:
// lock.Client.Listeners's answer, and 0 for a Redisson lock (a foreign
// holder: Redisson has no channel for such a request).
func (r *AnyLockClient) Listeners(ctx context.Context, h *lock.Holder) (int64, error) {
	return r.lc.Listeners(ctx, h)
}

// RequestRelease asks key's holder to release it as lock.Client does; a
// Redisson lock's holder cannot hear a request: it is answered
// lock.ErrCannotHear (or lock.ErrOwnerChanged when its fingerprint is no
// longer the one quoted), and nothing is sent.
func (r *AnyLockClient) RequestRelease(ctx context.Context, key, fingerprint string, req lock.ReleaseRequest) (*lock.Holder, int64, error) {
	h, n, err := r.lc.RequestRelease(ctx, key, fingerprint, req)
	if !redis.HasErrorPrefix(err, "WRONGTYPE") {
		return h, n, err
	}
	if h, err = r.Inspect(ctx, key); err != nil {
		return nil, 0, err
	}
	fp, _, _ := strings.Cut(fingerprint, "@")
	if !strings.EqualFold(fp, h.Fingerprint) {
		return h, 0, lock.ErrOwnerChanged
	}
	return h, 0, fmt.Errorf("%w: %s is a Redisson lock", lock.ErrCannotHear, h.Owner)
}
