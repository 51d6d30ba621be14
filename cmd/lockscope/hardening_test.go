package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

// A Redis URL's password never reaches the terminal or the logs, whether the
// URL parses or not, on every path that names the URL.
func TestRedisURLPasswordsAreNeverPrinted(t *testing.T) {
	t.Parallel()
	const pw = "Sup3r-s3cret"
	dead := freeAddr(t)
	for _, tt := range []struct {
		name string
		url  string
		code int
		want string
	}{
		{"bad escape", "redis://ops:" + pw + "@" + dead + "/%zz", 2, "invalid Redis URL redis://xxxxx@" + dead + "/%zz"},
		{"bad port", "redis://ops:" + pw + "@127.0.0.1:port/0", 2, "invalid Redis URL redis://xxxxx@127.0.0.1:port/0"},
		{"space in the password", "redis://ops:" + pw + " x@" + dead + "/0", 2, "invalid Redis URL redis://xxxxx@" + dead + "/0"},
		{"unescaped @ in the password", "redis://ops:" + pw + "@x@" + dead + "/0", 1, "cannot reach Redis at redis://ops:xxxxx@" + dead + "/0"},
		{"bad database", "redis://ops:" + pw + "@" + dead + "/db7", 2, "invalid Redis URL redis://ops:xxxxx@" + dead + "/db7"},
		{"wrong scheme", "http://ops:" + pw + "@" + dead, 2, "invalid Redis URL http://ops:xxxxx@" + dead},
		{"bad cluster seed", "redis://ops:" + pw + "@" + dead + "?addr=h:p:q", 2, "invalid Redis URL redis://ops:xxxxx@" + dead},
		{"unreachable", "redis://ops:" + pw + "@" + dead + "/0", 1, "cannot reach Redis at redis://ops:xxxxx@" + dead + "/0"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			for _, args := range [][]string{{"locks"}, {"serve", "--listen", freeAddr(t)}, {"load"}, {"demo", "--listen", freeAddr(t)}} {
				env := []string{"LOCKSCOPE_REDIS_URL=" + tt.url}
				if args[0] == "demo" {
					args = append(args, "--redis", tt.url)
				}
				stdout, stderr, code := lockscope(t, env, "", args...)
				if code != tt.code {
					t.Errorf("lockscope %s: exit %d, want %d", args[0], code, tt.code)
				}
				oneLine(t, stderr, "lockscope "+args[0]+": ", tt.want)
				if strings.Contains(stderr+stdout, pw) {
					t.Errorf("lockscope %s printed the password:\nstdout %s\nstderr %s", args[0], stdout, stderr)
				}
			}
		})
	}
}

// The URL serve and load log at start shows the user, not the password.
func TestServeLogsTheRedisURLWithoutItsPassword(t *testing.T) {
	t.Parallel()
	const pw = "Sup3r-s3cret"
	srv := redistest.Start(t, redistest.Options{})
	if err := srv.Client(t).ConfigSet(context.Background(), "requirepass", pw).Err(); err != nil {
		t.Fatal(err)
	}
	url := "redis://default:" + pw + "@" + srv.Addr() + "/0"
	_, p := serveReady(t, []string{"LOCKSCOPE_REDIS_URL=" + url})
	stdout, _, code := lockscope(t, []string{"LOCKSCOPE_REDIS_URL=" + url}, "", "load", "--duration", "200ms", "--scenarios", "payments", "--report-every", "0")
	if code != 0 {
		t.Fatalf("load with a password: exit %d", code)
	}
	logs := p.stderr.String()
	if !strings.Contains(logs, "redis://default:xxxxx@"+srv.Addr()) || !strings.Contains(stdout, "redis://default:xxxxx@"+srv.Addr()) {
		t.Errorf("serve's log or load's output does not name the redacted URL:\n%s\n%s", logs, stdout)
	}
	if strings.Contains(logs+stdout, pw) {
		t.Errorf("the password is printed:\n%s\n%s", logs, stdout)
	}
}

// A tokens file that others may read is refused, as ssh refuses a private key
// that others can read, and so are weak tokens: one clear line, exit 2.
func TestOperatorTokensFileMustBePrivateAndStrong(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	const good = "alice tok-alice-0123456789\n"
	run := func(t *testing.T, file string) (string, int) {
		_, stderr, code := lockscope(t, []string{"LOCKSCOPE_REDIS_URL=" + srv.URL(), "LOCKSCOPE_LISTEN=" + freeAddr(t), "LOCKSCOPE_OPERATOR_TOKENS_FILE=" + file,
			"LOCKSCOPE_SHUTDOWN_TIMEOUT=1s"}, "", "serve", "--log-level", "error")
		return stderr, code
	}
	for _, tt := range []struct {
		name    string
		content string
		mode    os.FileMode
		want    string // "" for accepted
	}{
		{"private", good, 0o600, ""},
		{"read-only private", good, 0o400, ""},
		{"world-readable", good, 0o644, "permissions 0644 are too open"},
		{"group-readable", good, 0o640, "permissions 0640 are too open"},
		{"world-writable", good, 0o602, "permissions 0602 are too open"},
		{"short token", "alice tok-0123\n", 0o600, `:1: the token of "alice" is shorter than 16 characters`},
		{"one character repeated", "# ops\nalice aaaaaaaaaaaaaaaaaaaaaaaa\n", 0o600, `:2: the token of "alice" is one character repeated`},
		{"few distinct characters", "alice abcabcabcabcabcabc\n", 0o600, `:1: the token of "alice" has 3 distinct characters, fewer than 8`},
		{"token without a name", "tok-alice-0123456789\n", 0o600, ":1: want 'NAME TOKEN'"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			file := t.TempDir() + "/tokens"
			if err := os.WriteFile(file, []byte(tt.content), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(file, tt.mode); err != nil {
				t.Fatal(err)
			}
			if tt.want == "" {
				base, p := serveReady(t, []string{"LOCKSCOPE_REDIS_URL=" + srv.URL(), "LOCKSCOPE_OPERATOR_TOKENS_FILE=" + file})
				code, body := apiRelease(t, base, "nothing:held", "0000000000000000", "test", "tok-alice-0123456789")
				if code != http.StatusNotFound {
					t.Errorf("release with alice's token = %d %s, want 404 (authenticated, nothing held)", code, body)
				}
				p.signal(os.Interrupt)
				p.wait(30 * time.Second)
				return
			}
			stderr, code := run(t, file)
			if code != 2 {
				t.Errorf("serve with %s: exit %d, want 2", tt.name, code)
			}
			oneLine(t, stderr, "lockscope serve: ", tt.want)
			if strings.Contains(stderr, "0123456789") || strings.Contains(stderr, "aaaaaaaa") || strings.Contains(stderr, "abcabc") {
				t.Errorf("the error shows the token: %s", stderr)
			}
		})
	}
	// Kubernetes mounts a Secret root-owned, mode 0440, group fsGroup: the
	// owner (not lockscope's user) granted the group. Only root can make a
	// file of another owner here; CI runs as root.
	if os.Getuid() == 0 {
		t.Run("group-readable, owned by another user", func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			file := dir + "/tokens"
			os.WriteFile(file, []byte(good), 0o440)
			if err := os.Chown(file, 65534, os.Getgid()); err != nil {
				t.Fatal(err)
			}
			base, _ := serveReady(t, []string{"LOCKSCOPE_REDIS_URL=" + srv.URL(), "LOCKSCOPE_OPERATOR_TOKENS_FILE=" + file})
			if code, body := apiRelease(t, base, "nothing:held", "0000000000000000", "test", "tok-alice-0123456789"); code != http.StatusNotFound {
				t.Errorf("release with alice's token = %d %s, want 404", code, body)
			}
			os.Chmod(file, 0o444)
			stderr, code := run(t, file)
			if code != 2 || !strings.Contains(stderr, "permissions 0444 are too open") {
				t.Errorf("world-readable file of another owner: exit %d %s, want 2 and the mode", code, stderr)
			}
		})
	}
}

// An operator's POST whose body trickles in or never comes is cut off after
// --read-timeout: the server answers and closes the connection instead of
// holding it open. A body that arrives in time is served as usual.
func TestSlowPOSTBodyIsCutOff(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	const readTimeout = 3 * time.Second
	base, _ := serveReady(t, []string{"LOCKSCOPE_REDIS_URL=" + srv.URL(), "LOCKSCOPE_OPERATOR_TOKEN=tok-ops-0123456789", "LOCKSCOPE_OPERATOR_USER=ops",
		"LOCKSCOPE_READ_TIMEOUT=" + readTimeout.String()})
	addr := strings.TrimPrefix(base, "http://")
	body := `{"fingerprint": "0000000000000000", "reason": "slow"}`
	head := fmt.Sprintf("POST /api/v1/locks/k/release HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer tok-ops-0123456789\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", addr, len(body))

	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, bufio.NewReader(c)
	}

	// In two parts, within the timeout: served (404: nothing held), and the
	// connection stays usable for the next request.
	c, r := dial()
	io.WriteString(c, head+body[:10])
	time.Sleep(100 * time.Millisecond)
	io.WriteString(c, body[10:])
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatalf("POST in two parts: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("POST in two parts = %d, want 404", resp.StatusCode)
	}
	io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: "+addr+"\r\n\r\n")
	if resp, err := http.ReadResponse(r, nil); err != nil || resp.StatusCode != 200 {
		t.Errorf("GET /healthz on the same connection: %v %v, want 200", resp, err)
	}

	// Stalled after 10 bytes of the body: cut off after the timeout.
	c, r = dial()
	start := time.Now()
	io.WriteString(c, head+body[:10])
	c.SetReadDeadline(time.Now().Add(30 * time.Second)) // never, without a body deadline
	rest, err := io.ReadAll(r)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("stalled POST: the server kept the connection open for %v (%v); want it closed after %v", took, err, readTimeout)
	}
	if took < readTimeout {
		t.Errorf("stalled POST cut off after %v, before the %v the client has", took, readTimeout)
	}
	if !strings.HasPrefix(string(rest), "HTTP/1.1 400 ") || !strings.Contains(string(rest), "timeout") {
		t.Errorf("stalled POST answered %q, want 400 naming the timeout", rest)
	}
	if code, _, err := get(context.Background(), base+"/healthz"); err != nil || code != 200 {
		t.Errorf("GET /healthz after the stalled POST = %d %v, want 200", code, err)
	}
}
