// Package redissontest drives Redisson's layout in tests: a real client of
// it (npm node-redisson, pinned in tools/foreign) and the Lua scripts Java
// Redisson sends (copied from its source: RedissonFairLock, RedissonReadLock,
// RedissonWriteLock, RedissonSemaphore, RedissonPermitExpirableSemaphore),
// to be run with EVAL exactly as Redisson runs them.
package redissontest

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lockscope/lockscope/internal/testkit/syncbuf"
)

// here is this package's directory (redisson_lock.js) and, two levels up,
// the repository's root (tools/foreign/node_modules).
func here(t testing.TB) string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("redissontest: no source path")
	}
	return filepath.Dir(file)
}

// Node is a node-redisson client taking one lock (redisson_lock.js): it
// waits if the lock is held, then holds it, its watchdog renewing it,
// until killed.
type Node struct {
	cmd      *exec.Cmd
	mu       sync.Mutex
	acquired time.Time
	done     chan struct{}
}

// StartNode starts a node-redisson client taking lock key on the Redis at
// 127.0.0.1:port, with watchdog as its lease, and returns once it asked for
// the lock (it holds it or waits for it). It is killed at the end of t.
func StartNode(t testing.TB, port int, key string, watchdog time.Duration) *Node {
	t.Helper()
	dir := here(t)
	cmd := exec.Command("node", filepath.Join(dir, "redisson_lock.js"), strconv.Itoa(port), key, strconv.FormatInt(watchdog.Milliseconds(), 10))
	cmd.Env = append(os.Environ(), "NODE_PATH="+filepath.Join(dir, "..", "..", "..", "tools", "foreign", "node_modules"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr syncbuf.Buffer // written by exec's goroutine while we may read it
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("node-redisson (tools/foreign, scripts/deps.sh): %v", err)
	}
	p := &Node{cmd: cmd, done: make(chan struct{})}
	waiting := make(chan struct{})
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			if line == "waiting" {
				close(waiting)
			}
			if ms, ok := strings.CutPrefix(line, "acquired "); ok {
				n, _ := strconv.ParseInt(ms, 10, 64)
				p.mu.Lock()
				p.acquired = time.UnixMilli(n)
				p.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() && stderr.String() != "" {
			t.Logf("node-redisson stderr: %s", stderr.String())
		}
	})
	select {
	case <-waiting:
	case <-p.done:
		t.Fatalf("node-redisson exited: %s", stderr.String())
	case <-time.After(15 * time.Second):
		t.Fatal("node-redisson did not start within 15s")
	}
	return p
}

// AcquiredAt is when the client took the lock (its clock); zero while it
// waits.
func (p *Node) AcquiredAt() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.acquired
}

// Kill crashes the client: its watchdog stops, its subscriptions close.
func (p *Node) Kill() { p.cmd.Process.Signal(syscall.SIGKILL) }

// Java Redisson's scripts. The fair lock's (RedissonFairLock.tryLockInnerAsync
// with EVAL_LONG; KEYS: the lock, its queue, its timeout set; ARGV: lease ms,
// the thread's field, the thread wait time ms (5000 by default), now ms) and
// its acquireFailedAsync (KEYS: queue, timeout set; ARGV: field, thread wait
// time ms); the read lock's (KEYS: the lock, its timeout prefix
// "{<lock>}:<field>:rwlock_timeout"; ARGV: lease ms, field, the write
// field) and the write lock's (KEYS: the lock; ARGV: lease ms, field).
const (
	FairTryLock = `while true do local firstThreadId2 = redis.call('lindex', KEYS[2], 0);if firstThreadId2 == false then break;end;local timeout = redis.call('zscore', KEYS[3], firstThreadId2);if timeout ~= false and tonumber(timeout) <= tonumber(ARGV[4]) then redis.call('zrem', KEYS[3], firstThreadId2);redis.call('lpop', KEYS[2]);else break;end;end;` +
		`if (redis.call('exists', KEYS[1]) == 0) and ((redis.call('exists', KEYS[2]) == 0) or (redis.call('lindex', KEYS[2], 0) == ARGV[2])) then redis.call('lpop', KEYS[2]);redis.call('zrem', KEYS[3], ARGV[2]);local keys = redis.call('zrange', KEYS[3], 0, -1);for i = 1, #keys, 1 do redis.call('zincrby', KEYS[3], -tonumber(ARGV[3]), keys[i]);end;redis.call('hset', KEYS[1], ARGV[2], 1);redis.call('pexpire', KEYS[1], ARGV[1]);return nil;end;` +
		`if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then redis.call('hincrby', KEYS[1], ARGV[2],1);redis.call('pexpire', KEYS[1], ARGV[1]);return nil;end;` +
		`local timeout = redis.call('zscore', KEYS[3], ARGV[2]);if timeout ~= false then local ttl = redis.call('pttl', KEYS[1]);return math.max(0, ttl); end;` +
		`local lastThreadId = redis.call('lindex', KEYS[2], -1);local ttl;if lastThreadId ~= false and lastThreadId ~= ARGV[2] and redis.call('zscore', KEYS[3], lastThreadId) ~= false then ttl = tonumber(redis.call('zscore', KEYS[3], lastThreadId)) - tonumber(ARGV[4]);else ttl = redis.call('pttl', KEYS[1]);end;local timeout = ttl + tonumber(ARGV[3]) + tonumber(ARGV[4]);if redis.call('zadd', KEYS[3], timeout, ARGV[2]) == 1 then redis.call('rpush', KEYS[2], ARGV[2]);end;return ttl;`
	FairAcquireFailed = `local queue = redis.call('lrange', KEYS[1], 0, -1);local i = 1;while i <= #queue and queue[i] ~= ARGV[1] do i = i + 1;end;i = i + 1;while i <= #queue do redis.call('zincrby', KEYS[2], -tonumber(ARGV[2]), queue[i]);i = i + 1;end;redis.call('zrem', KEYS[2], ARGV[1]);redis.call('lrem', KEYS[1], 0, ARGV[1]);`
	ReadTryLock       = `local mode = redis.call('hget', KEYS[1], 'mode'); if (mode == false) then redis.call('hset', KEYS[1], 'mode', 'read'); redis.call('hset', KEYS[1], ARGV[2], 1); redis.call('set', KEYS[2] .. ':1', 1); redis.call('pexpire', KEYS[2] .. ':1', ARGV[1]); redis.call('pexpire', KEYS[1], ARGV[1]); return nil; end; if (mode == 'read') or (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1) then local ind = redis.call('hincrby', KEYS[1], ARGV[2], 1); local key = KEYS[2] .. ':' .. ind;redis.call('set', key, 1); redis.call('pexpire', key, ARGV[1]); local remainTime = redis.call('pttl', KEYS[1]); redis.call('pexpire', KEYS[1], math.max(remainTime, ARGV[1])); return nil; end;return redis.call('pttl', KEYS[1]);`
	WriteTryLock      = `local mode = redis.call('hget', KEYS[1], 'mode'); if (mode == false) then redis.call('hset', KEYS[1], 'mode', 'write'); redis.call('hset', KEYS[1], ARGV[2], 1); redis.call('pexpire', KEYS[1], ARGV[1]); return nil; end; if (mode == 'write') then if (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then redis.call('hincrby', KEYS[1], ARGV[2], 1); local currentExpire = redis.call('pttl', KEYS[1]); redis.call('pexpire', KEYS[1], currentExpire + ARGV[1]); return nil; end; end;return redis.call('pttl', KEYS[1]);`
)

// Java Redisson's semaphores. RSemaphore (RedissonSemaphore): the key is a
// counter of the permits available. trySetPermits (KEYS: the semaphore, its
// channel "redisson_sc:{<name>}"; ARGV: permits, "publish"), tryAcquire
// (KEYS: the semaphore; ARGV: permits; 1 if acquired), release (KEYS: the
// semaphore, its channel; ARGV: permits, "publish").
const (
	SemaphoreTrySetPermits = `local value = redis.call('get', KEYS[1]); if (value == false) then redis.call('set', KEYS[1], ARGV[1]); redis.call(ARGV[2], KEYS[2], ARGV[1]); return 1;end;return 0;`
	SemaphoreTryAcquire    = `local value = redis.call('get', KEYS[1]); if (value ~= false and tonumber(value) >= tonumber(ARGV[1])) then local val = redis.call('decrby', KEYS[1], ARGV[1]); return 1; end; return 0;`
	SemaphoreRelease       = `local value = redis.call('incrby', KEYS[1], ARGV[1]); redis.call(ARGV[2], KEYS[2], value); `
)

// RPermitExpirableSemaphore (RedissonPermitExpirableSemaphore): the key is
// the counter of permits available, "{<name>}:timeout" a sorted set of the
// permits acquired (each a 16-byte id, shown by Redisson in hex), scored by
// when each expires (unix ms; 922337203685477 for a permit without a
// lease). trySetPermits as RSemaphore's; tryAcquire (KEYS: the semaphore,
// its timeout set, its channel; ARGV: how many, their expiry (unix ms), now
// (unix ms), the no-lease score, "publish", then each permit's id as raw
// bytes; "OK" if acquired), tryRelease (KEYS: the semaphore, its channel,
// its timeout set; ARGV: the permit's raw id, 1, now (unix ms), "publish").
const (
	ExpirableTryAcquire = `local expiredIds = redis.call('zrangebyscore', KEYS[2], 0, ARGV[3], 'limit', 0, ARGV[1]); if #expiredIds > 0 then redis.call('zrem', KEYS[2], unpack(expiredIds)); local value = redis.call('incrby', KEYS[1], #expiredIds); if tonumber(value) > 0 then redis.call(ARGV[5], KEYS[3], value); end;end; ` +
		`local value = redis.call('get', KEYS[1]); if (value ~= false and tonumber(value) >= tonumber(ARGV[1])) then redis.call('decrby', KEYS[1], ARGV[1]); for i = 6, #ARGV, 1 do redis.call('zadd', KEYS[2], ARGV[2], ARGV[i]); end; local ttl = redis.call('pttl', KEYS[1]); if ttl > 0 then redis.call('pexpire', KEYS[2], ttl); end; return 'OK'; end; ` +
		`local v = redis.call('zrange', KEYS[2], 0, 0, 'WITHSCORES'); if v[1] ~= nil and v[2] ~= ARGV[4] then return ':' .. tostring(v[2]); end return nil;`
	ExpirableTryRelease = `local expire = redis.call('zscore', KEYS[3], ARGV[1]);local removed = redis.call('zrem', KEYS[3], ARGV[1]);if tonumber(removed) ~= 1 then return 0;end;local value = redis.call('incrby', KEYS[1], ARGV[2]); redis.call(ARGV[4], KEYS[2], value); if tonumber(expire) <= tonumber(ARGV[3]) then return 0;end;return 1;`
	// ExpirableNoLease is the score of a permit acquired without a lease.
	ExpirableNoLease = 922337203685477
)
