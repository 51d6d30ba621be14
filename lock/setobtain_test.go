package lock

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/redis/go-redis/v9"
)

// serverError is an error as Redis sends it (redis.HasErrorPrefix sees it).
type serverError string

func (e serverError) Error() string { return string(e) }
func (serverError) RedisError()     {}

// oldSetHook answers "SET ... GET" like Redis before 7.0 (which cannot
// combine NX and GET): with a syntax error, without sending it. No older
// redis-server is installed here, so a hook stands in for one.
type oldSetHook struct{ refused int }

func isSetGet(cmd redis.Cmder) bool {
	a := cmd.Args()
	last, _ := a[len(a)-1].(string)
	return cmd.Name() == "set" && strings.EqualFold(last, "get")
}

func (h *oldSetHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *oldSetHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if isSetGet(cmd) {
			h.refused++
			cmd.SetErr(serverError("ERR syntax error"))
			return cmd.Err()
		}
		return next(ctx, cmd)
	}
}

func (h *oldSetHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		rest := cmds[:0:0]
		for _, cmd := range cmds {
			if isSetGet(cmd) {
				h.refused++
				cmd.SetErr(serverError("ERR syntax error"))
			} else {
				rest = append(rest, cmd)
			}
		}
		if len(rest) == 0 {
			return nil
		}
		return next(ctx, rest)
	}
}

// TestObtainWithoutSetGet: against a server that refuses SET NX GET (sent
// by the retries of a refused obtain) the client falls back to obtain.lua
// for good, with the same results.
func TestObtainWithoutSetGet(t *testing.T) {
	rdb := redistest.Shared(t).Client(t)
	hook := &oldSetHook{}
	rdb.AddHook(hook)
	// The holder lets go once the waiting Obtain has been refused (its
	// waiting event), so the retries, which carry GET, must take the key
	// however slow the host.
	waiting := make(chan struct{})
	var once sync.Once
	rec := recorderFunc(func(e event.Event) {
		if e.Type == event.Waiting {
			once.Do(func() { close(waiting) })
		}
	})
	c := New(rdb, &Options{Owner: "old", Recorder: rec})
	p := redistest.KeyPrefix(t)
	ctx := context.Background()

	l, err := c.Obtain(ctx, p+"a", 5*time.Second, nil)
	if err != nil || hook.refused != 0 {
		t.Fatalf("Obtain of a free key = %v (SET GET refused %d times), want the lock by a plain SET", err, hook.refused)
	}
	go func() {
		<-waiting
		l.Release(ctx)
	}()
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	l2, err := c.Obtain(wctx, p+"a", 5*time.Second, &ObtainOptions{Retry: LinearBackoff(5 * time.Millisecond)})
	if err != nil {
		t.Fatalf("waiting Obtain = %v, want the lock through obtain.lua once released", err)
	}
	if hook.refused != 1 || !c.batch.noSetGet.Load() {
		t.Fatalf("SET GET refused %d times, fallback on = %v; want 1 and on", hook.refused, c.batch.noSetGet.Load())
	}
	if v, _ := keyState(t, rdb, p+"a"); !strings.HasPrefix(v, valueMagic) || !strings.Contains(v, l2.ID()) {
		t.Errorf("value = %q, want the waiting caller's", v)
	}
	_, err = c.Obtain(ctx, p+"a", time.Second, &ObtainOptions{Retry: LimitRetry(LinearBackoff(time.Millisecond), 2)})
	var noe *NotObtainedError
	if !errors.As(err, &noe) || noe.Holder == nil || noe.Holder.Lease != l2.ID() || noe.Holder.TTL <= 4*time.Second {
		t.Errorf("Obtain on the held key = %v, want held by %s with ~5s left", err, l2.ID())
	}
	if hook.refused != 1 {
		t.Errorf("SET GET sent %d times, want only once", hook.refused)
	}
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestSetObtainReply covers the replies of the SET obtain that a test
// against Redis cannot arrange on purpose.
func TestSetObtainReply(t *testing.T) {
	const head = "ls1|tok|lease|"
	reply := func(v any, err error) *redis.Cmd {
		c := redis.NewCmd(context.Background())
		c.SetVal(v)
		c.SetErr(err)
		return c
	}
	for _, tc := range []struct {
		name   string
		get    bool
		cmd    *redis.Cmd
		ok     bool
		holder string
		err    string // prefix of the error, "" for none
	}{
		{"first attempt: set", false, reply("OK", nil), true, "", ""},
		{"first attempt: refused", false, reply(nil, redis.Nil), false, "", ""},
		{"retry: set", true, reply(nil, redis.Nil), true, "", ""},
		{"retry: held by another", true, reply("ls1|x|y|0|1|bob", nil), false, "ls1|x|y|0|1|bob", ""},
		{"retry: held by a constant", true, reply("1", nil), false, "1", ""},
		{"retry: our own value, go-redis retried a SET that had run", true, reply(head+"0|1|me", nil), true, head + "0|1|me", ""},
		{"old server", true, reply(nil, serverError("ERR syntax error")), false, "", errSetGetUnsupported.Error()},
		{"wrong type", false, reply(nil, serverError("WRONGTYPE Operation against a key holding the wrong kind of value")), false, "", "WRONGTYPE"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, holder, err := setObtainReply(tc.cmd, head, tc.get)
			if (err == nil) != (tc.err == "") || err != nil && !strings.HasPrefix(err.Error(), tc.err) {
				t.Fatalf("err = %v, want %q", err, tc.err)
			}
			if ok != tc.ok || holder != tc.holder {
				t.Errorf("reply = %v, %q; want %v, %q", ok, holder, tc.ok, tc.holder)
			}
		})
	}
}

// TestGiveUpReportsHolderTTL: the lock path does not read the holder's TTL
// while it waits; a caller whose retries run out (time left) still gets it,
// one whose context ended does not (0: not known), and neither waits for it.
func TestGiveUpReportsHolderTTL(t *testing.T) {
	c, rdb, _, p := newClient(t, "waiter")
	key := p + "k"
	held := mustObtain(t, New(rdb, &Options{Owner: "holder"}), key, 10*time.Second, nil)
	defer held.Release(context.Background())

	_, err := c.Obtain(context.Background(), key, time.Second, &ObtainOptions{Retry: LimitRetry(LinearBackoff(5*time.Millisecond), 3)})
	var noe *NotObtainedError
	if !errors.As(err, &noe) || noe.Reason != "held" || noe.Attempts != 4 || noe.Holder == nil || noe.Holder.Lease != held.ID() {
		t.Fatalf("Obtain with 3 retries = %v, want held by %s after 4 attempts", err, held.ID())
	}
	if ttl := noe.Holder.TTL; ttl <= 9*time.Second || ttl > 10*time.Second {
		t.Errorf("holder TTL = %v, want in (9s, 10s]", ttl)
	}
	if !strings.Contains(err.Error(), " more") {
		t.Errorf("error = %q, want the holder's remaining time", err)
	}

	// A second the retries run to the deadline: the last attempt is a
	// retry's SET ... GET, whose holder's TTL is not read. (With 50 ms a
	// loaded host's first attempt, SET then inspect, took 47 ms: the call
	// gave up after it, with the TTL its inspect had read.)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err = c.Obtain(ctx, key, time.Second, &ObtainOptions{Retry: LinearBackoff(5 * time.Millisecond)})
	if !errors.As(err, &noe) || noe.Reason != "timeout" || noe.Holder == nil || noe.Holder.Owner != "holder" || noe.Attempts < 2 || noe.Holder.TTL != 0 {
		t.Fatalf("Obtain until the deadline = %v (holder %+v), want timeout after retries, held by holder, TTL 0 (not read)", err, noe.Holder)
	}
}

// recorderFunc is a Recorder calling itself.
type recorderFunc func(event.Event)

func (f recorderFunc) Record(e event.Event) { f(e) }
