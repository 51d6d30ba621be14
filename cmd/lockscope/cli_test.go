package main

import (
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

// oneLine checks that stderr is exactly one line starting with prefix and
// containing want, and nothing like a stack trace.
func oneLine(t *testing.T, stderr, prefix, want string) {
	t.Helper()
	lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
	if len(lines) != 1 {
		t.Fatalf("stderr has %d lines, want 1:\n%s", len(lines), stderr)
	}
	if !strings.HasPrefix(lines[0], prefix) || !strings.Contains(lines[0], want) {
		t.Errorf("stderr = %q, want a line starting with %q containing %q", lines[0], prefix, want)
	}
	if strings.Contains(stderr, "goroutine ") || strings.Contains(stderr, "panic") {
		t.Errorf("stderr has a stack trace:\n%s", stderr)
	}
}

func TestBadUsageExits2WithOneLine(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		env    []string
		args   []string
		prefix string
		want   string
	}{
		{"no command", nil, nil, "lockscope: ", "no command given"},
		{"unknown command", nil, []string{"frobnicate"}, "lockscope: ", `unknown command "frobnicate"`},
		{"unknown flag", nil, []string{"serve", "--nope"}, "lockscope serve: ", "flag provided but not defined: -nope"},
		{"bad number", nil, []string{"load", "--rate", "fast"}, "lockscope load: ", `invalid value "fast" for flag -rate: want a number`},
		{"bad duration env", []string{"LOCKSCOPE_STUCK_AFTER=soon"}, []string{"serve"}, "lockscope serve: ", `invalid value "soon" for LOCKSCOPE_STUCK_AFTER: entry "soon": want a duration`},
		{"bad log level env", []string{"LOCKSCOPE_LOG_LEVEL=loud"}, []string{"serve"}, "lockscope serve: ", `invalid value "loud" for LOCKSCOPE_LOG_LEVEL`},
		{"bad log format", nil, []string{"load", "--log-format", "xml"}, "lockscope load: ", `invalid log format "xml"`},
		{"unknown scenario", []string{"LOCKSCOPE_LOAD_SCENARIOS=cron,nope"}, []string{"load"}, "lockscope load: ", `unknown scenario "nope"`},
		{"negative rate", nil, []string{"load", "--rate=-1"}, "lockscope load: ", "--rate, --concurrency and --speed must be positive"},
		{"missing argument", nil, []string{"inspect"}, "lockscope inspect: ", "missing argument"},
		{"too many arguments", nil, []string{"locks", "a*", "b*"}, "lockscope locks: ", "too many arguments"},
		{"unexpected argument", nil, []string{"serve", "now"}, "lockscope serve: ", `unexpected argument "now"`},
		{"release without reason", nil, []string{"release", "k"}, "lockscope release: ", "--reason is required"},
		{"bad class rule", nil, []string{"serve", "--class", "=x"}, "lockscope serve: ", `invalid class rule "=x"`},
		{"bad watch kind", []string{"LOCKSCOPE_WATCH=lock:*=tll"}, []string{"serve"}, "lockscope serve: ", `--watch (LOCKSCOPE_WATCH): watch rule "lock:*=tll": unknown kind "tll"`},
		{"user without password", []string{"LOCKSCOPE_OPERATOR_USER=ana"}, []string{"serve"}, "lockscope serve: ", "LOCKSCOPE_OPERATOR_USER needs LOCKSCOPE_OPERATOR_PASSWORD"},
		{"weak token", nil, []string{"serve", "--operator-token", "a"}, "lockscope serve: ", "LOCKSCOPE_OPERATOR_TOKEN (--operator-token) is shorter than 16 characters"},
		{"token of few characters", []string{"LOCKSCOPE_OPERATOR_TOKEN=abababababababababab"}, []string{"serve"}, "lockscope serve: ", "LOCKSCOPE_OPERATOR_TOKEN (--operator-token) has 2 distinct characters, fewer than 8"},
		{"weak password", []string{"LOCKSCOPE_OPERATOR_USER=ana"}, []string{"serve", "--operator-password", "x"}, "lockscope serve: ", "LOCKSCOPE_OPERATOR_PASSWORD (--operator-password) is shorter than 12 characters"},
		{"password one character", []string{"LOCKSCOPE_OPERATOR_USER=ana", "LOCKSCOPE_OPERATOR_PASSWORD=aaaaaaaaaaaaaaaa"}, []string{"demo"}, "lockscope demo: ", "LOCKSCOPE_OPERATOR_PASSWORD (--operator-password) is one character repeated"},
		{"trace url without id", nil, []string{"serve", "--trace-url", "https://tempo.example.com/trace/"}, "lockscope serve: ", "--trace-url (LOCKSCOPE_TRACE_URL): trace URL must contain {trace_id}"},
		{"trace url not http", []string{"LOCKSCOPE_TRACE_URL=javascript:alert('{trace_id}')"}, []string{"demo"}, "lockscope demo: ", "--trace-url (LOCKSCOPE_TRACE_URL): trace URL must be http:// or https://"},
		{"bad redis url", nil, []string{"inspect", "--redis", "http://x", "k"}, "lockscope inspect: ", "invalid Redis URL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			stdout, stderr, code := lockscope(t, tt.env, "", tt.args...)
			if code != 2 {
				t.Errorf("lockscope %v exit code = %d, want 2", tt.args, code)
			}
			oneLine(t, stderr, tt.prefix, tt.want)
			if strings.Contains(stdout, "goroutine ") {
				t.Errorf("stdout has a stack trace:\n%s", stdout)
			}
		})
	}
}

func TestHelp(t *testing.T) {
	t.Parallel()
	stdout, stderr, code := lockscope(t, nil, "", "help", "serve")
	if code != 0 || stderr != "" {
		t.Fatalf("lockscope help serve: exit %d, stderr %q; want 0 and nothing", code, stderr)
	}
	for _, want := range []string{"LOCKSCOPE_REDIS_URL", "LOCKSCOPE_LISTEN", "default 127.0.0.1:8080", "LOCKSCOPE_STREAM",
		"LOCKSCOPE_OPERATOR_USER", "LOCKSCOPE_OPERATOR_PASSWORD", "LOCKSCOPE_OPERATOR_TOKEN", "LOCKSCOPE_WATCH",
		"LOCKSCOPE_STUCK_AFTER", "LOCKSCOPE_LOG_LEVEL"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("lockscope help serve does not mention %s:\n%s", want, stdout)
		}
	}
	out, _, code := lockscope(t, nil, "", "load", "-h")
	if code != 0 || !strings.Contains(out, "--rate") || !strings.Contains(out, "LOCKSCOPE_LOAD_RATE") {
		t.Errorf("lockscope load -h: exit %d, output:\n%s", code, out)
	}
	out, _, code = lockscope(t, nil, "", "--help")
	for _, c := range []string{"demo", "serve", "load", "locks", "inspect", "release"} {
		if code != 0 || !regexp.MustCompile(`(?m)^  `+c+` `).MatchString(out) {
			t.Errorf("lockscope --help: exit %d, does not list %s:\n%s", code, c, out)
		}
	}
}

func TestUnreachableRedis(t *testing.T) {
	t.Parallel()
	dead := "redis://" + freeAddr(t) // nothing listens there
	for _, args := range [][]string{
		{"serve", "--listen", freeAddr(t)},
		{"load"},
		{"locks"},
		{"inspect", "k"},
		{"release", "k", "--reason", "r", "--yes"},
	} {
		t.Run(args[0], func(t *testing.T) {
			t.Parallel()
			_, stderr, code := lockscope(t, []string{"LOCKSCOPE_REDIS_URL=" + dead}, "", args...)
			if code != 1 {
				t.Errorf("lockscope %v with Redis down: exit code %d, want 1", args, code)
			}
			oneLine(t, stderr, "lockscope "+args[0]+": ", "cannot reach Redis at "+dead)
		})
	}
}

func TestListenAddressInUse(t *testing.T) {
	t.Parallel()
	busy := freeAddr(t)
	first := start(t, nil, "demo", "--listen", busy)
	redistest.WaitFor(t, 10*time.Second, "the demo to print its URL", func() error {
		if !strings.Contains(first.stdout.String(), "dashboard http://"+busy) {
			return errors.New("demo has not printed its URL")
		}
		return nil
	})
	_, stderr, code := lockscope(t, nil, "", "demo", "--listen", busy)
	if code != 1 {
		t.Errorf("second demo on %s: exit code %d, want 1", busy, code)
	}
	oneLine(t, stderr, "lockscope demo: ", "cannot listen on "+busy)
}
