package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockscope/lockscope/event"
	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/lockscope/lockscope/lock"
)

// tlsEnv is the environment that reaches a TLS Redis at url with the test's
// CA and client certificate.
func tlsEnv(files *redistest.TLSFiles, url string) []string {
	return []string{
		"LOCKSCOPE_REDIS_URL=" + url,
		"LOCKSCOPE_REDIS_CA_CERT=" + files.CACert,
		"LOCKSCOPE_REDIS_CLIENT_CERT=" + files.ClientCert,
		"LOCKSCOPE_REDIS_CLIENT_KEY=" + files.ClientKey,
	}
}

// lockKeys runs `locks --json` with env and returns the keys it lists.
func lockKeys(t *testing.T, env []string, args ...string) []string {
	t.Helper()
	stdout, stderr, code := lockscope(t, env, "", slices.Concat([]string{"locks", "--json"}, args)...)
	if code != 0 {
		t.Fatalf("lockscope locks %v: exit %d, stderr %s", args, code, stderr)
	}
	var got []holderJSON
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("locks --json output is not JSON: %v\n%s", err, stdout)
	}
	var keys []string
	for _, h := range got {
		keys = append(keys, h.Key)
	}
	slices.Sort(keys)
	return keys
}

// Every command reaches a Redis that speaks TLS only, with a certificate of
// a private CA, and requires client certificates: the flags and their
// environment variables.
func TestEveryCommandOverTLSWithAPrivateCA(t *testing.T) {
	t.Parallel()
	files := redistest.NewTLSFiles(t)
	srv := redistest.Start(t, redistest.Options{TLS: files})
	rdb := srv.Client(t)
	lc := lock.New(rdb, nil)
	ctx := context.Background()
	env := tlsEnv(files, srv.URL())
	const stream = "tls:events"

	_, h := hold(t, lc, "invoice:7", "billing/pod-1", time.Minute)
	if got := lockKeys(t, env); !slices.Equal(got, []string{"invoice:7"}) {
		t.Errorf("locks over TLS lists %v, want [invoice:7]", got)
	}
	// The flags do what the variables do.
	flags := []string{"--redis", srv.URL(), "--redis-ca-cert", files.CACert, "--redis-client-cert", files.ClientCert, "--redis-client-key", files.ClientKey}
	if got := lockKeys(t, nil, flags...); !slices.Equal(got, []string{"invoice:7"}) {
		t.Errorf("locks with the TLS flags lists %v, want [invoice:7]", got)
	}
	stdout, stderr, code := lockscope(t, env, "", "inspect", "invoice:7")
	if code != 0 || !strings.Contains(stdout, "billing/pod-1") || !strings.Contains(stdout, h.Fingerprint) {
		t.Errorf("inspect over TLS: exit %d, stdout %s, stderr %s; want the holder and its fingerprint", code, stdout, stderr)
	}

	// serve: ready, and it sees what a TLS client does.
	base, _ := serveReady(t, append(env, "LOCKSCOPE_STREAM="+stream))
	tlc := lock.New(rdb, &lock.Options{Recorder: lock.NewEmitter(rdb, &lock.EmitterOptions{Stream: stream})})
	if _, err := tlc.Obtain(ctx, "report:9", time.Minute, &lock.ObtainOptions{Owner: "reports/pod-2"}); err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(t, 15*time.Second, "report:9 held by reports/pod-2 over TLS", func() error {
		_, body, err := get(ctx, base+"/api/v1/locks/report:9")
		if err != nil || !strings.Contains(body, "reports/pod-2") {
			return fmt.Errorf("serve over TLS does not show report:9 held by reports/pod-2: %v %s", err, body)
		}
		return nil
	})

	// release, recorded in the stream.
	stdout, stderr, code = lockscope(t, append(env, "LOCKSCOPE_STREAM="+stream), "", "release", "invoice:7", "--reason", "tls test", "--yes")
	if code != 0 || !strings.Contains(stdout, "released invoice:7") {
		t.Errorf("release over TLS: exit %d, stdout %s, stderr %s", code, stdout, stderr)
	}
	if n := rdb.Exists(ctx, "invoice:7").Val(); n != 0 {
		t.Errorf("invoice:7 still exists after the release over TLS")
	}

	// load and demo --redis write their events over TLS.
	stdout, stderr, code = lockscope(t, append(env, "LOCKSCOPE_STREAM=tls:load"), "", "load", "--duration", "1s", "--scenarios", "payments", "--report-every", "0", "--key-prefix", "load:")
	if code != 0 || !strings.Contains(stdout, "total: attempts=") {
		t.Errorf("load over TLS: exit %d, stdout %s, stderr %s", code, stdout, stderr)
	}
	if n := rdb.XLen(ctx, "tls:load").Val(); n == 0 {
		t.Errorf("load over TLS wrote no event to tls:load")
	}
	stdout, stderr, code = lockscope(t, append(env, "LOCKSCOPE_STREAM=tls:demo", "LOCKSCOPE_LISTEN="+freeAddr(t)), "",
		"demo", "--redis", srv.URL(), "--duration", "2s", "--scenarios", "payments", "--key-prefix", "demo:")
	if code != 0 || !strings.Contains(stdout, "Redis rediss://"+srv.Addr()) {
		t.Errorf("demo --redis over TLS: exit %d, stdout %s, stderr %s", code, stdout, stderr)
	}
	if n := rdb.XLen(ctx, "tls:demo").Val(); n == 0 {
		t.Errorf("demo over TLS wrote no event to tls:demo")
	}
	evs := redistest.ReadStream(t, rdb, stream).Events
	if !slices.ContainsFunc(evs, func(e event.Event) bool { return e.Type == event.Forced && e.Key == "invoice:7" }) {
		t.Errorf("no forced event for invoice:7 in %s: %+v", stream, evs)
	}
}

// What goes wrong with TLS says what to fix, in one line: exit 1 for a
// server that refuses, 2 for flags or files that cannot work.
func TestTLSFailuresAreOneClearLine(t *testing.T) {
	t.Parallel()
	files := redistest.NewTLSFiles(t)
	srv := redistest.Start(t, redistest.Options{TLS: files})
	plain := redistest.Start(t, redistest.Options{})
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.txt")
	os.WriteFile(notPEM, []byte("not a certificate\n"), 0o644)
	missing := filepath.Join(dir, "nope.pem")
	url := srv.URL()
	ca, cert, key := files.CACert, files.ClientCert, files.ClientKey

	tests := []struct {
		name string
		args []string
		code int
		want []string // in the one line, in order
	}{
		{"wrong CA", []string{"--redis", url, "--redis-ca-cert", files.OtherCACert, "--redis-client-cert", cert, "--redis-client-key", key}, 1,
			[]string{"cannot reach Redis at " + url, "certificate signed by unknown authority", "--redis-ca-cert"}},
		{"system CAs only", []string{"--redis", url, "--redis-client-cert", cert, "--redis-client-key", key}, 1,
			[]string{"certificate signed by unknown authority", "give the CA's PEM file with --redis-ca-cert"}},
		{"no client certificate", []string{"--redis", url, "--redis-ca-cert", ca}, 1,
			[]string{"cannot reach Redis at " + url, "client certificate", "--redis-client-cert and --redis-client-key"}},
		{"client certificate of another CA", []string{"--redis", url, "--redis-ca-cert", ca, "--redis-client-cert", files.OtherClientCert, "--redis-client-key", files.OtherClientKey}, 1,
			[]string{"client certificate", "--redis-client-cert"}},
		{"expired client certificate", []string{"--redis", url, "--redis-ca-cert", ca, "--redis-client-cert", files.ExpiredClientCert, "--redis-client-key", files.ExpiredClientKey}, 1,
			[]string{"client certificate", "--redis-client-cert"}},
		{"plain text to a TLS port", []string{"--redis", "redis://" + srv.Addr()}, 1,
			[]string{"cannot reach Redis at redis://" + srv.Addr(), "if Redis speaks TLS, use a rediss:// URL"}},
		{"TLS to a plain port", []string{"--redis", "rediss://" + plain.Addr(), "--redis-ca-cert", ca}, 1,
			[]string{"cannot reach Redis at rediss://" + plain.Addr(), "if Redis does not speak TLS on this port, use a redis:// URL"}},
		{"missing CA file", []string{"--redis", url, "--redis-ca-cert", missing}, 2,
			[]string{"--redis-ca-cert: " + missing + ": no such file or directory (LOCKSCOPE_REDIS_CA_CERT)"}},
		{"CA file without a certificate", []string{"--redis", url, "--redis-ca-cert", notPEM}, 2,
			[]string{"--redis-ca-cert " + notPEM + ": no PEM certificate in the file"}},
		{"certificate without key", []string{"--redis", url, "--redis-client-cert", cert}, 2,
			[]string{"--redis-client-cert needs --redis-client-key"}},
		{"key without certificate", []string{"--redis", url, "--redis-client-key", key}, 2,
			[]string{"--redis-client-key needs --redis-client-cert"}},
		{"missing key file", []string{"--redis", url, "--redis-client-cert", cert, "--redis-client-key", missing}, 2,
			[]string{"--redis-client-key: " + missing + ": no such file or directory"}},
		{"key of another certificate", []string{"--redis", url, "--redis-client-cert", cert, "--redis-client-key", files.OtherClientKey}, 2,
			[]string{"--redis-client-cert " + cert + " with --redis-client-key " + files.OtherClientKey, "private key does not match public key"}},
		{"TLS flags with redis://", []string{"--redis", plain.URL(), "--redis-ca-cert", ca}, 2,
			[]string{"need a rediss:// URL"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// A generous start-up wait: a loaded machine must show the
			// failure itself, not a deadline. Only a plain server that
			// never answers a TLS handshake is a deadline.
			wait := "40s"
			if tt.name == "TLS to a plain port" {
				wait = "2s"
			}
			_, stderr, code := lockscope(t, []string{"LOCKSCOPE_REDIS_TIMEOUT=" + wait}, "", append([]string{"locks"}, tt.args...)...)
			if code != tt.code {
				t.Errorf("exit code %d, want %d", code, tt.code)
			}
			oneLine(t, stderr, "lockscope locks: ", tt.want[0])
			rest := stderr
			for _, w := range tt.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Errorf("stderr = %q, want %q (in this order: %q)", stderr, w, tt.want)
					break
				}
				rest = rest[i+len(w):]
			}
		})
	}
	t.Run("demo without --redis", func(t *testing.T) {
		t.Parallel()
		_, stderr, code := lockscope(t, []string{"LOCKSCOPE_REDIS_CA_CERT=" + ca}, "", "demo", "--listen", freeAddr(t))
		if code != 2 {
			t.Errorf("exit code %d, want 2", code)
		}
		oneLine(t, stderr, "lockscope demo: ", "the embedded one has no TLS")
	})
}

// A Redis Cluster whose nodes and bus speak TLS: the seed-list URL and one
// node's URL both reach every master.
func TestClusterOverTLS(t *testing.T) {
	t.Parallel()
	files := redistest.NewTLSFiles(t)
	c := redistest.StartClusterWith(t, redistest.Options{TLS: files})
	cl := c.Client(t)
	lc := lock.New(cl, nil)
	var want []string
	for i := range 12 {
		key := fmt.Sprintf("job:%d", i)
		hold(t, lc, key, "cron/pod-1", time.Minute)
		want = append(want, key)
	}
	slices.Sort(want)
	a := c.Addrs()
	for _, url := range []string{
		"rediss://" + a[0] + "?addr=" + a[1] + "&addr=" + a[2],
		"rediss://" + a[1], // one node: lockscope finds the Cluster
	} {
		if got := lockKeys(t, tlsEnv(files, url)); !slices.Equal(got, want) {
			t.Errorf("locks on %s lists %v, want %v", url, got, want)
		}
	}
	_, stderr, code := lockscope(t, []string{"LOCKSCOPE_REDIS_URL=rediss://" + a[0], "LOCKSCOPE_REDIS_CA_CERT=" + files.CACert, "LOCKSCOPE_REDIS_TIMEOUT=40s"}, "", "locks")
	if code != 1 || !strings.Contains(stderr, "--redis-client-cert") {
		t.Errorf("locks on the TLS Cluster without a client certificate: exit %d, %s; want 1 and the client certificate named", code, stderr)
	}
}

// Sentinels, master and replica that speak TLS only: the Sentinel URL finds
// the master over TLS.
func TestSentinelOverTLS(t *testing.T) {
	t.Parallel()
	files := redistest.NewTLSFiles(t)
	s := redistest.StartSentinelWith(t, redistest.Options{TLS: files})
	master := s.Master.Client(t)
	hold(t, lock.New(master, nil), "payment:1", "payments/pod-3", time.Minute)
	// On a loaded machine the Sentinels may fail the master over: the
	// replica must have the lock too.
	if n, err := master.Wait(context.Background(), 1, 10*time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT 1 = %d, %v: the replica did not get the lock", n, err)
	}
	if got := lockKeys(t, tlsEnv(files, s.URL())); !slices.Equal(got, []string{"payment:1"}) {
		t.Errorf("locks through the TLS Sentinels lists %v, want [payment:1]", got)
	}
	_, stderr, code := lockscope(t, []string{"LOCKSCOPE_REDIS_URL=" + s.URL(), "LOCKSCOPE_REDIS_CLIENT_CERT=" + files.ClientCert, "LOCKSCOPE_REDIS_CLIENT_KEY=" + files.ClientKey,
		"LOCKSCOPE_REDIS_TIMEOUT=40s"}, "", "locks")
	if code != 1 || !strings.Contains(stderr, "--redis-ca-cert") {
		t.Errorf("locks through the TLS Sentinels without the CA: exit %d, %s; want 1 and --redis-ca-cert named", code, stderr)
	}
}
