package workload

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockscope/lockscope/internal/ctxsleep"
	"github.com/lockscope/lockscope/lock"
)

// job is one unit of traffic run by a worker; cost is the lock attempts it
// makes, which is what Rate paces.
type job struct {
	run  func(ctx context.Context, r *rand.Rand, worker int)
	cost float64
}

// traffic paces payments and inventory jobs at Rate attempts per second
// across Concurrency workers.
func (s *Simulator) traffic(ctx context.Context) {
	jobs := make(chan job)
	var wg sync.WaitGroup
	for w := range s.opt.Concurrency {
		wg.Go(func() {
			r := s.rng()
			for j := range jobs {
				j.run(ctx, r, w+1)
			}
		})
	}
	defer func() {
		close(jobs)
		wg.Wait()
	}()

	r := s.rng()
	orders := &atomic.Int64{}
	orders.Store(100000 + r.Int64N(800000))
	pay := job{run: func(ctx context.Context, r *rand.Rand, _ int) { s.payment(ctx, r, orders.Add(1)) }, cost: 2}
	inv := job{run: s.inventory, cost: 1}

	// Jobs arrive as a Poisson process (exponential gaps averaging
	// cost/Rate), as independent customers do: evenly spaced arrivals would
	// never collide on the hot SKU at a low rate, real ones do. Catch up at
	// most a tenth of a second: when the workers are all busy the achieved
	// rate drops instead of bursting afterwards.
	pace := min(max(time.Duration(float64(time.Second)/s.opt.Rate), time.Millisecond), 20*time.Millisecond)
	tick := time.NewTicker(pace)
	defer tick.Stop()
	next := time.Now()
	for {
		now := time.Now()
		if lag := now.Sub(next); lag > 100*time.Millisecond {
			next = now.Add(-100 * time.Millisecond)
		}
		for !next.After(now) {
			j := inv
			switch {
			case !s.has(Inventory):
				j = pay
			case s.has(Payments) && r.IntN(100) < 15:
				j = pay
			}
			select {
			case jobs <- j:
				next = next.Add(time.Duration(r.ExpFloat64() * j.cost / s.opt.Rate * float64(time.Second)))
			case <-ctx.Done():
				return
			}
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return
		}
	}
}

// payment is a customer double-clicking "Pay": two submits of the same order
// reach two pods a few milliseconds apart. Each tries the order's lock once;
// the one that gets it charges the card, the other answers "already being
// processed". The winner holds until both submits have tried, as a charge
// takes far longer than a double click.
func (s *Simulator) payment(ctx context.Context, r *rand.Rand, order int64) {
	s.payments.Add(1)
	key := s.key(fmt.Sprintf("payment:ord-%d", order))
	pods := r.Perm(4)
	gap := between(r, 0, 30*time.Millisecond)
	charge := between(r, 20*time.Millisecond, 80*time.Millisecond)

	var tried, done sync.WaitGroup
	tried.Add(2)
	var charged atomic.Int32
	click := func(owner string) {
		l := s.try(ctx, key, 10*time.Second, &lock.ObtainOptions{Owner: owner})
		tried.Done()
		if l == nil {
			return
		}
		charged.Add(1)
		ctxsleep.Sleep(ctx, charge)
		tried.Wait()
		s.release(l)
	}
	done.Go(func() {
		ctxsleep.Sleep(ctx, gap)
		click(fmt.Sprintf("checkout-api/pod-%d", pods[1]+1))
	})
	click(fmt.Sprintf("checkout-api/pod-%d", pods[0]+1))
	done.Wait()
	if charged.Load() > 1 {
		s.doubleCharges.Add(1)
	}
}

// inventory reserves stock: every order line locks its SKU, and a few
// bestsellers get most of the orders. Callers wait for the lock with retry
// up to a quarter of a second, then give up (a timeout the shop retries).
func (s *Simulator) inventory(ctx context.Context, r *rand.Rand, worker int) {
	var sku int
	switch p := r.IntN(100); {
	case p < 40:
		sku = 1
	case p < 60:
		sku = 2
	case p < 70:
		sku = 3
	default:
		sku = 100 + r.IntN(500)
	}
	key := s.key(fmt.Sprintf("inventory:sku-%d", sku))
	wctx, cancel := context.WithTimeout(ctx, 250*time.Millisecond)
	l := s.obtain(wctx, key, 5*time.Second, &lock.ObtainOptions{
		Retry: lock.LinearBackoff(5 * time.Millisecond),
		Owner: fmt.Sprintf("inventory-svc/worker-%d", worker),
	})
	cancel()
	if l == nil {
		return
	}
	// The reservation writes the stock to the database while it holds
	// the lock: 10 to 40 ms. At the demo's 30 jobs/s about a quarter of the
	// bestseller's reservations then find it held, some 3 contentions a
	// second, three times the cron job's designed refusals (4 every 5 s),
	// so that it tops Hot keys within seconds, as the tour says; at 2 to
	// 15 ms the two were even and the cron job topped it in 1 run of 2.
	ctxsleep.Sleep(ctx, between(r, 10*time.Millisecond, 40*time.Millisecond))
	s.release(l)
}
