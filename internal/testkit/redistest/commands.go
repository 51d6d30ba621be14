package redistest

import (
	"context"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Commands is a go-redis hook (rdb.AddHook) that counts the commands a
// client sends, alone or pipelined, whose key is Key (the first argument, or
// one of a script's KEYS), and, when Name is set, only those of that name
// (lower case: "set", "evalsha"). A test waits on the count, an Obtain's
// attempts for one, instead of guessing how long they take.
type Commands struct {
	Key  string
	Name string
	n    atomic.Int64
}

var _ redis.Hook = (*Commands)(nil)

// N returns how many such commands were sent so far.
func (c *Commands) N() int64 { return c.n.Load() }

func (c *Commands) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *Commands) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.count(cmd)
		return next(ctx, cmd)
	}
}

func (c *Commands) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			c.count(cmd)
		}
		return next(ctx, cmds)
	}
}

func (c *Commands) count(cmd redis.Cmder) {
	name := cmd.Name()
	if c.Name != "" && name != c.Name {
		return
	}
	// The key is the first argument, or a script's KEYS.
	args := cmd.Args()
	keys := args[min(1, len(args)):min(2, len(args))]
	if name == "eval" || name == "evalsha" || name == "eval_ro" || name == "evalsha_ro" || name == "fcall" {
		n := 0
		if len(args) > 2 {
			n, _ = args[2].(int)
		}
		keys = args[min(3, len(args)):min(3+n, len(args))]
	}
	for _, a := range keys {
		s, ok := a.(string)
		if p, isPtr := a.(*string); isPtr {
			s, ok = *p, true // lock's commands name their lease's fields
		}
		if ok && s == c.Key {
			c.n.Add(1)
			return
		}
	}
}
