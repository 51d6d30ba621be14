package lock

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/testkit/eventrec"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

// waitListening waits until h's hold has n listeners, as an operator
// counts them.
func waitListening(t *testing.T, op *Client, h *Holder, n int64) {
	t.Helper()
	var got int64
	var err error
	redistest.WaitFor(t, 15*time.Second, "the holder's listeners", func() bool {
		got, err = op.Listeners(context.Background(), h)
		return err == nil && got == n
	})
}

// receive waits for a request on ch, failing the test after within.
func receive(t *testing.T, ch <-chan ReleaseRequest, within time.Duration) ReleaseRequest {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(within):
		t.Fatalf("no release request within %v", within)
	}
	return ReleaseRequest{}
}

func requestedEvents(rec *eventrec.Recorder) []event.Event {
	var out []event.Event
	for _, e := range rec.Events() {
		if e.Type == event.Requested {
			out = append(out, e)
		}
	}
	return out
}

// TestReleaseRequestHeard: a holder with a 30 s TTL hears the request at
// once (well within the TTL, not at a renewal), with who, why, when and the
// grace; the request is on the record with the listener it reached.
func TestReleaseRequestHeard(t *testing.T) {
	holder, rdb, _, prefix := newClient(t, "editor/alice")
	opRec := &eventrec.Recorder{}
	op := New(rdb, &Options{Owner: "lockscope-dashboard", Recorder: opRec})
	ctx := context.Background()
	key := prefix + "workflow:42"
	const ttl = 30 * time.Second

	l := mustObtain(t, holder, key, ttl, &ObtainOptions{AutoRenew: true})
	asks := l.ReleaseRequested()
	if again := l.ReleaseRequested(); again != asks {
		t.Errorf("ReleaseRequested() returned a second channel")
	}
	h, err := op.Inspect(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	waitListening(t, op, h, 1)

	sent := time.Now()
	asked, n, err := op.RequestRelease(ctx, key, h.Fingerprint, ReleaseRequest{Operator: "bob", Reason: "I need to edit it", Grace: 30 * time.Second})
	if err != nil || n != 1 || asked.Lease != l.ID() {
		t.Fatalf("RequestRelease = %+v, %d, %v; want lease %s, 1 listener, nil", asked, n, err, l.ID())
	}
	got := receive(t, asks, ttl)
	if took := time.Since(sent); took >= ttl {
		t.Errorf("the request was heard after %v, want under the TTL %v", took, ttl)
	}
	if got.Operator != "bob" || got.Reason != "I need to edit it" || got.Grace != 30*time.Second || got.At.Before(sent.Add(-time.Second)) || got.At.After(time.Now()) {
		t.Errorf("request = %+v, want bob's, with its reason, a 30s grace and the time it was sent", got)
	}
	evs := requestedEvents(opRec)
	if len(evs) != 1 {
		t.Fatalf("requested events = %+v, want 1", evs)
	}
	e := evs[0]
	if e.Key != key || e.Owner != "editor/alice" || e.Lease != l.ID() || e.By != "bob" || e.Reason != "I need to edit it" || e.Wait != 30*time.Second || e.Count != 1 {
		t.Errorf("requested event = %+v, want key, holder, lease, by, reason, grace 30s, count 1", e)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	waitListening(t, op, h, 0) // it stops listening with its hold
}

// TestReleaseRequestInsideDo: a function run by Do hears the request
// through the lease its context carries, and returns: Do releases.
func TestReleaseRequestInsideDo(t *testing.T) {
	holder, rdb, _, prefix := newClient(t, "worker/do")
	op := New(rdb, nil)
	ctx := context.Background()
	key := prefix + "job"
	listening := make(chan *Lease, 1)
	done := make(chan error, 1)
	go func() {
		done <- holder.Do(ctx, key, 30*time.Second, nil, func(ctx context.Context) error {
			l, _ := FromContext(ctx)
			asks := l.ReleaseRequested()
			listening <- l
			select {
			case r := <-asks:
				if r.Operator != "carol" {
					return errors.New("request from " + r.Operator)
				}
				return nil // saved: release
			case <-ctx.Done():
				return ctx.Err()
			}
		})
	}()
	l := <-listening
	h, err := op.Inspect(ctx, key)
	if err != nil || h.Lease != l.ID() {
		t.Fatalf("Inspect = %+v, %v; want the Do's lease", h, err)
	}
	waitListening(t, op, h, 1)
	if _, n, err := op.RequestRelease(ctx, key, h.Fingerprint, ReleaseRequest{Operator: "carol", Reason: "deploy"}); err != nil || n != 1 {
		t.Fatalf("RequestRelease = %d, %v; want 1 listener", n, err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Do = %v, want nil", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Do did not return after the request")
	}
	if _, err := op.Inspect(ctx, key); !errors.Is(err, ErrNotHeld) {
		t.Errorf("Inspect after Do = %v, want ErrNotHeld", err)
	}
}

// TestReleaseRequestNotListening: a lockscope holder that never asked to
// hear requests has no listener; a request to it is sent and recorded as
// heard by nobody.
func TestReleaseRequestNotListening(t *testing.T) {
	holder, rdb, _, prefix := newClient(t, "old/app")
	opRec := &eventrec.Recorder{}
	op := New(rdb, &Options{Recorder: opRec})
	ctx := context.Background()
	key := prefix + "k"
	l := mustObtain(t, holder, key, 30*time.Second, nil)
	defer l.Release(ctx)
	h, _ := op.Inspect(ctx, key)
	if n, err := op.Listeners(ctx, h); n != 0 || err != nil {
		t.Fatalf("Listeners = %d, %v; want 0", n, err)
	}
	if _, n, err := op.RequestRelease(ctx, key, h.Fingerprint, ReleaseRequest{Operator: "bob", Reason: "r"}); n != 0 || err != nil {
		t.Fatalf("RequestRelease = %d, %v; want 0 listeners, nil", n, err)
	}
	if evs := requestedEvents(opRec); len(evs) != 1 || evs[0].Count != 0 || evs[0].Lease != l.ID() {
		t.Errorf("requested events = %+v, want one, count 0, of the hold", evs)
	}
}

// TestReleaseRequestOwnerChanged: an operator who saw one holder cannot
// ask its successor; nothing reaches the successor, neither the refused
// request nor one that raced it onto the old hold's channel.
func TestReleaseRequestOwnerChanged(t *testing.T) {
	holder, rdb, _, prefix := newClient(t, "first")
	opRec := &eventrec.Recorder{}
	op := New(rdb, &Options{Recorder: opRec})
	ctx := context.Background()
	key := prefix + "k"
	first := mustObtain(t, holder, key, 30*time.Second, nil)
	first.ReleaseRequested()
	seen, _ := op.Inspect(ctx, key)
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	next := New(rdb, &Options{Owner: "second"})
	second := mustObtain(t, next, key, 30*time.Second, nil)
	defer second.Release(ctx)
	asks := second.ReleaseRequested()
	now, _ := op.Inspect(ctx, key)
	waitListening(t, op, now, 1)

	got, n, err := op.RequestRelease(ctx, key, seen.Fingerprint, ReleaseRequest{Operator: "bob", Reason: "stale page"})
	if !errors.Is(err, ErrOwnerChanged) || n != 0 || got == nil || got.Owner != "second" {
		t.Fatalf("RequestRelease(old fingerprint) = %+v, %d, %v; want the second holder, 0, ErrOwnerChanged", got, n, err)
	}
	// An asker that inspected before the change and published after it
	// publishes on the first hold's channel: not the second's.
	stale := event.Request{Lease: seen.Lease, By: "racer", TS: time.Now().UnixNano()}
	if err := rdb.Publish(ctx, event.RequestChannel(seen.Lease), stale.Encode()).Err(); err != nil {
		t.Fatal(err)
	}
	// Messages on one connection arrive in order: had either reached the
	// second holder, it would come before this one.
	if _, n, err := op.RequestRelease(ctx, key, now.Fingerprint, ReleaseRequest{Operator: "marker", Reason: "m"}); err != nil || n != 1 {
		t.Fatalf("RequestRelease(current) = %d, %v", n, err)
	}
	if r := receive(t, asks, 30*time.Second); r.Operator != "marker" {
		t.Errorf("the second holder heard %+v first, want the marker request only", r)
	}
	if evs := requestedEvents(opRec); len(evs) != 1 || evs[0].By != "marker" {
		t.Errorf("requested events = %+v, want only the marker's (a refused request is not sent)", evs)
	}
}

// TestReleaseRequestForeign: another library's lock has no channel: it
// cannot be asked, and nothing is sent or recorded.
func TestReleaseRequestForeign(t *testing.T) {
	_, rdb, _, prefix := newClient(t, "x")
	opRec := &eventrec.Recorder{}
	op := New(rdb, &Options{Recorder: opRec})
	ctx := context.Background()
	key := prefix + "redsync"
	if err := rdb.Set(ctx, key, "k3yb9Xq2Lm0Zp7Rt5Vw1Yg==", 30*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	h, _ := op.Inspect(ctx, key)
	if n, err := op.Listeners(ctx, h); n != 0 || err != nil {
		t.Errorf("Listeners(foreign) = %d, %v; want 0", n, err)
	}
	if _, _, err := op.RequestRelease(ctx, key, h.Fingerprint, ReleaseRequest{Operator: "bob"}); !errors.Is(err, ErrCannotHear) {
		t.Errorf("RequestRelease(foreign) = %v, want ErrCannotHear", err)
	}
	if _, _, err := op.RequestRelease(ctx, prefix+"free", h.Fingerprint, ReleaseRequest{Operator: "bob"}); !errors.Is(err, ErrNotHeld) {
		t.Errorf("RequestRelease(free key) = %v, want ErrNotHeld", err)
	}
	if evs := requestedEvents(opRec); len(evs) != 0 {
		t.Errorf("requested events = %+v, want none", evs)
	}
}

// TestReleaseRequestBadMessages: what reaches a lease's channel and is no
// request for it (garbage, another lease's, too large) is dropped; the
// channel holds one unread request and drops the next.
func TestReleaseRequestBadMessages(t *testing.T) {
	holder, rdb, _, prefix := newClient(t, "h")
	op := New(rdb, nil)
	ctx := context.Background()
	key := prefix + "k"
	l := mustObtain(t, holder, key, 30*time.Second, nil)
	defer l.Release(ctx)
	asks := l.ReleaseRequested()
	h, _ := op.Inspect(ctx, key)
	waitListening(t, op, h, 1)
	ch := event.RequestChannel(l.ID())
	other := event.Request{Lease: "0123456789abcdef", By: "other"}.Encode()
	for _, m := range []string{"", "not json", `{"v":9,"lease":"` + l.ID() + `"}`, string(other), `{"v":1,"lease":"` + l.ID() + `","by":"` + strings.Repeat("x", event.MaxRequestBytes) + `"}`} {
		if err := rdb.Publish(ctx, ch, m).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := op.RequestRelease(ctx, key, h.Fingerprint, ReleaseRequest{Operator: "first"}); err != nil {
		t.Fatal(err)
	}
	// Messages on one connection arrive in order: had a bad one been taken
	// for a request, it would be read first.
	if r := receive(t, asks, 30*time.Second); r.Operator != "first" {
		t.Errorf("first request read = %+v, want the first valid one", r)
	}
}

// TestReleaseRequestHoldsOne: while one request waits unread, the lease's
// channel drops the next (the operator asks the same thing again).
func TestReleaseRequestHoldsOne(t *testing.T) {
	l := &Lease{head: "ls1|" + strings.Repeat("t", 22) + "|0123456789abcdef|"}
	e := &listening{l: l, asks: make(chan ReleaseRequest, 1)}
	s := &listener{leases: map[string]*listening{event.RequestChannel(l.ID()): e}}
	for _, by := range []string{"first", "second"} {
		s.deliver(&redis.Message{Channel: event.RequestChannel(l.ID()), Payload: string(event.Request{Lease: l.ID(), By: by}.Encode())})
	}
	if n := len(e.asks); n != 1 {
		t.Fatalf("requests waiting = %d, want 1", n)
	}
	if r := <-e.asks; r.Operator != "first" {
		t.Errorf("request kept = %+v, want the first", r)
	}
	s.deliver(&redis.Message{Channel: event.RequestChannel(l.ID()), Payload: string(event.Request{Lease: l.ID(), By: "third"}.Encode())})
	if r := <-e.asks; r.Operator != "third" {
		t.Errorf("request after the first was read = %+v, want the third", r)
	}
}

// pubsubClients returns the ids of the Pub/Sub connections a server has.
func pubsubClients(t *testing.T, rdb *redis.Client) []string {
	t.Helper()
	list, err := rdb.ClientList(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, line := range strings.Split(list, "\n") {
		if strings.Contains(line, " flags=P") {
			id, _, _ := strings.Cut(strings.TrimPrefix(line, "id="), " ")
			ids = append(ids, id)
		}
	}
	return ids
}

// TestReleaseRequestOneSubscriptionPerClient: every lease of a client that
// listens shares one Pub/Sub connection, made with the first, kept for the
// next hold within the linger and closed after it; leases that do not
// listen make none.
func TestReleaseRequestOneSubscriptionPerClient(t *testing.T) {
	s := redistest.Start(t, redistest.Options{}) // its own server: the shared one has other tests' subscribers
	rdb := s.Client(t)
	holder := New(rdb, &Options{Owner: "many"})
	op := New(rdb, nil)
	if holder.listen.linger != 30*time.Second {
		t.Errorf("linger = %v, want 30s", holder.listen.linger)
	}
	ctx := context.Background()
	var leases []*Lease
	for i := range 5 {
		l := mustObtain(t, holder, "k:"+string(rune('a'+i)), 30*time.Second, nil)
		leases = append(leases, l)
	}
	if ids := pubsubClients(t, rdb); len(ids) != 0 {
		t.Fatalf("Pub/Sub connections before any lease listens = %v, want none", ids)
	}
	for _, l := range leases {
		l.ReleaseRequested()
	}
	for _, l := range leases {
		h, _ := op.Inspect(ctx, l.Key())
		waitListening(t, op, h, 1)
	}
	first := pubsubClients(t, rdb)
	if len(first) != 1 {
		t.Errorf("Pub/Sub connections with 5 leases listening = %v, want 1", first)
	}
	for _, l := range leases {
		l.Release(ctx)
	}
	for _, l := range leases {
		h := &Holder{Key: l.Key(), Lease: l.ID()}
		waitListening(t, op, h, 0)
	}
	// The next hold, within the linger, listens on the same connection.
	next := mustObtain(t, holder, "k:next", 30*time.Second, nil)
	next.ReleaseRequested()
	h, _ := op.Inspect(ctx, next.Key())
	waitListening(t, op, h, 1)
	if again := pubsubClients(t, rdb); len(again) != 1 || len(first) != 1 || again[0] != first[0] {
		t.Errorf("Pub/Sub connections of the next hold = %v, want the same one as before %v", again, first)
	}
	// A short linger: the connection closes once no lease has listened
	// for it.
	holder.listen.mu.Lock()
	holder.listen.linger = 100 * time.Millisecond
	holder.listen.mu.Unlock()
	next.Release(ctx)
	redistest.WaitFor(t, 15*time.Second, "the Pub/Sub connection to close after the linger", func() bool { return len(pubsubClients(t, rdb)) == 0 })
}

// TestReleaseRequestCluster: on a 3-master cluster one connection hears
// the leases of keys on every master, and the operator counts listeners
// on every node.
func TestReleaseRequestCluster(t *testing.T) {
	cl := redistest.StartCluster(t).Client(t)
	ctx := context.Background()
	holder := New(cl, &Options{Owner: "clustered"})
	op := New(cl, nil)
	keys := []string{"invoice:17", "{user1}:cart", "job:{42}:run", "a", "b", "c"}
	masters := map[string]bool{}
	var leases []*Lease
	var chans []<-chan ReleaseRequest
	for _, k := range keys {
		l := mustObtain(t, holder, k, 30*time.Second, nil)
		defer l.Release(ctx)
		leases = append(leases, l)
		chans = append(chans, l.ReleaseRequested())
		m, err := cl.MasterForKey(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		masters[m.Options().Addr] = true
	}
	if len(masters) < 2 {
		t.Fatalf("keys on %d masters, want several", len(masters))
	}
	for i, l := range leases {
		h, err := op.Inspect(ctx, l.Key())
		if err != nil {
			t.Fatal(err)
		}
		waitListening(t, op, h, 1)
		if _, n, err := op.RequestRelease(ctx, l.Key(), h.Fingerprint, ReleaseRequest{Operator: "ops", Reason: l.Key()}); err != nil || n != 1 {
			t.Fatalf("RequestRelease(%q) = %d, %v; want 1 listener", l.Key(), n, err)
		}
		if r := receive(t, chans[i], 30*time.Second); r.Reason != l.Key() {
			t.Errorf("lease of %q heard %+v", l.Key(), r)
		}
	}
	var subs, total atomic.Int32
	err := cl.ForEachShard(ctx, func(ctx context.Context, node *redis.Client) error {
		n, err := node.PubSubNumSub(ctx, event.RequestChannel(leases[0].ID())).Result()
		if err == nil && n[event.RequestChannel(leases[0].ID())] > 0 {
			subs.Add(1)
		}
		total.Add(1)
		return err
	})
	if err != nil || subs.Load() != 1 || total.Load() < 3 {
		t.Errorf("nodes with a subscriber = %d of %d (%v), want 1: one connection per client", subs.Load(), total.Load(), err)
	}
}

// TestReleaseRequestSentinel: through a Sentinel-discovered master.
func TestReleaseRequestSentinel(t *testing.T) {
	sn := redistest.StartSentinel(t)
	opt, err := redis.ParseFailoverURL(sn.URL())
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewFailoverClient(opt)
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	holder := New(rdb, &Options{Owner: "behind-sentinel"})
	op := New(rdb, nil)
	l := mustObtain(t, holder, "sentinel:k", 30*time.Second, nil)
	defer l.Release(ctx)
	asks := l.ReleaseRequested()
	h, _ := op.Inspect(ctx, l.Key())
	waitListening(t, op, h, 1)
	if _, n, err := op.RequestRelease(ctx, l.Key(), h.Fingerprint, ReleaseRequest{Operator: "ops"}); err != nil || n != 1 {
		t.Fatalf("RequestRelease = %d, %v; want 1 listener", n, err)
	}
	if r := receive(t, asks, 30*time.Second); r.Operator != "ops" {
		t.Errorf("heard %+v", r)
	}
}
