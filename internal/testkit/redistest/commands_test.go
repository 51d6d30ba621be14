package redistest

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
)

// Commands counts the commands naming its key (first argument or a script's
// KEYS), alone and pipelined, of its name when it has one, and no others.
func TestCommandsCountsOneKey(t *testing.T) {
	rdb := Shared(t).Client(t)
	ctx := context.Background()
	key, other := KeyPrefix(t)+"k", KeyPrefix(t)+"other"
	sets, all := &Commands{Key: key, Name: "set"}, &Commands{Key: key}
	rdb.AddHook(sets)
	rdb.AddHook(all)
	rdb.Set(ctx, key, "v", 0)
	rdb.Get(ctx, key)
	rdb.Set(ctx, other, key, 0) // key as a value: not counted
	rdb.Eval(ctx, "return 1", []string{other, key})
	if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, key, "w", 0)
		p.Set(ctx, other, "x", 0)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got, want := sets.N(), int64(2); got != want {
		t.Errorf("Commands{Name: set}.N() = %d, want %d", got, want)
	}
	if got, want := all.N(), int64(4); got != want {
		t.Errorf("Commands{}.N() = %d, want %d", got, want)
	}
}
