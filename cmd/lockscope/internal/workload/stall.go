package workload

import (
	"context"
	"net"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// stall is a go-redis hook that holds every command back while a pause is
// on, the way a stop-the-world GC, a VM migration or SIGSTOP holds back a
// whole process: the lock library's renewer included. A command caught by
// the pause goes out when it ends, whatever deadline it had, as it would
// from a process that was frozen before it could look at its clock.
type stall struct {
	until atomic.Int64 // unix ns; 0 means no pause
}

var _ redis.Hook = (*stall)(nil)

// pause stalls the connections for d from now.
func (s *stall) pause(d time.Duration) { s.until.Store(time.Now().Add(d).UnixNano()) }

// resume ends a pause early (when the simulator stops).
func (s *stall) resume() { s.until.Store(0) }

// wait blocks while a pause is on. It polls so that resume ends it at once.
func (s *stall) wait() bool {
	stalled := false
	for {
		left := time.Until(time.Unix(0, s.until.Load()))
		if left <= 0 {
			return stalled
		}
		stalled = true
		time.Sleep(min(left, 5*time.Millisecond))
	}
}

func (s *stall) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		s.wait()
		return next(ctx, network, addr)
	}
}

func (s *stall) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if s.wait() {
			ctx = context.WithoutCancel(ctx)
		}
		return next(ctx, cmd)
	}
}

func (s *stall) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if s.wait() {
			ctx = context.WithoutCancel(ctx)
		}
		return next(ctx, cmds)
	}
}

// stalled returns a new client to the same Redis as rdb with s hooked in, so
// a pause freezes only the paused holder. Other client kinds are used as
// they are: the pause then stalls nothing and the holder notices its loss
// locally, without a lost event.
func stalled(rdb redis.UniversalClient, s *stall) redis.UniversalClient {
	var c redis.UniversalClient
	switch r := rdb.(type) {
	case *redis.Client:
		o := *r.Options()
		o.PoolSize = 4
		// Per-client state the copy must not share with rdb.
		o.PushNotificationProcessor = nil
		o.ClientSideCache = nil
		if m := o.MaintNotificationsConfig; m != nil {
			mc := *m
			o.MaintNotificationsConfig = &mc
		}
		c = redis.NewClient(&o)
	case *redis.ClusterClient:
		o := *r.Options()
		c = redis.NewClusterClient(&o)
	default:
		return rdb
	}
	c.AddHook(s)
	return c
}
