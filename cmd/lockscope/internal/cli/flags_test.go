package cli

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lockscope/lockscope/collector/state"
)

func lookup(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
}

func testFlags() (*flagSet, *string, *time.Duration, *[]string, *bool) {
	f := newFlagSet(&command{name: "test", args: "KEY"})
	var s string
	var d time.Duration
	var l []string
	var b bool
	f.String(&s, "reason", "", "", "")
	f.Duration(&d, "stuck-after", "LOCKSCOPE_STUCK_AFTER", time.Minute, "")
	f.List(&l, "watch", "LOCKSCOPE_WATCH", []string{"default:*"}, "")
	f.Bool(&b, "yes", "LOCKSCOPE_ASSUME_YES", false, "")
	f.minArgs, f.maxArgs = 0, -1
	return f, &s, &d, &l, &b
}

func TestFlagsEnvThenCommandLine(t *testing.T) {
	tests := []struct {
		name      string
		env       map[string]string
		args      []string
		wantD     time.Duration
		wantL     []string
		wantB     bool
		wantS     string
		wantPos   []string
		wantError string
	}{
		{name: "defaults", wantD: time.Minute, wantL: []string{"default:*"}},
		{name: "env", env: map[string]string{"LOCKSCOPE_STUCK_AFTER": "30s", "LOCKSCOPE_WATCH": "lock:*, job:*", "LOCKSCOPE_ASSUME_YES": "true"},
			wantD: 30 * time.Second, wantL: []string{"lock:*", "job:*"}, wantB: true},
		{name: "flag wins and replaces the env list", env: map[string]string{"LOCKSCOPE_STUCK_AFTER": "30s", "LOCKSCOPE_WATCH": "lock:*"},
			args: []string{"--stuck-after=2m", "--watch", "a:*", "--watch", "b:*"}, wantD: 2 * time.Minute, wantL: []string{"a:*", "b:*"}},
		{name: "empty env is unset", env: map[string]string{"LOCKSCOPE_STUCK_AFTER": ""}, wantD: time.Minute, wantL: []string{"default:*"}},
		{name: "interleaved", args: []string{"KEY", "--reason", "stuck export", "--yes", "MORE"},
			wantD: time.Minute, wantL: []string{"default:*"}, wantB: true, wantS: "stuck export", wantPos: []string{"KEY", "MORE"}},
		{name: "dash dash", args: []string{"--yes", "--", "--reason", "-k"},
			wantD: time.Minute, wantL: []string{"default:*"}, wantB: true, wantPos: []string{"--reason", "-k"}},
		{name: "bad env", env: map[string]string{"LOCKSCOPE_STUCK_AFTER": "soon"},
			wantError: `lockscope test: invalid value "soon" for LOCKSCOPE_STUCK_AFTER: want a duration such as 500ms, 30s or 5m (run 'lockscope test -h')`},
		{name: "bad flag", args: []string{"--stuck-after", "5"},
			wantError: `lockscope test: invalid value "5" for flag -stuck-after: want a duration such as 500ms, 30s or 5m (run 'lockscope test -h')`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, s, d, l, b := testFlags()
			pos, err := f.parse(tt.args, lookup(tt.env))
			if tt.wantError != "" {
				if err == nil || err.Error() != tt.wantError || ExitCode(err) != ExitUsage {
					t.Fatalf("parse(%q) = %v (exit %d), want %q (exit 2)", tt.args, err, ExitCode(err), tt.wantError)
				}
				return
			}
			if err != nil {
				t.Fatalf("parse(%q) = %v, want nil", tt.args, err)
			}
			if *d != tt.wantD || *b != tt.wantB || *s != tt.wantS || !cmp.Equal(*l, tt.wantL) || !cmp.Equal(pos, tt.wantPos) {
				t.Errorf("parse(%q) gave duration %v, bool %v, string %q, list %q, args %q; want %v, %v, %q, %q, %q",
					tt.args, *d, *b, *s, *l, pos, tt.wantD, tt.wantB, tt.wantS, tt.wantL, tt.wantPos)
			}
		})
	}
}

func TestHelpFlag(t *testing.T) {
	f, _, _, _, _ := testFlags()
	if _, err := f.parse([]string{"-h"}, lookup(nil)); !errors.Is(err, errHelp) {
		t.Errorf("parse(-h) = %v, want errHelp", err)
	}
	var b strings.Builder
	f.usage(&b)
	for _, want := range []string{"--stuck-after duration", "(env LOCKSCOPE_STUCK_AFTER, default 1m0s)", "(env LOCKSCOPE_WATCH, default default:*)"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("usage lacks %q:\n%s", want, b.String())
		}
	}
}

// Every flag of every command can be set from the environment, except the
// per-invocation arguments of release (a variable left set must never turn
// a release of one key into one of every lock an owner holds, nor a polite
// ask into a forced release after the grace); one variable means one flag.
func TestEveryFlagHasAnEnvironmentVariable(t *testing.T) {
	perInvocation := map[string]bool{"reason": true, "fingerprint": true, "owner": true, "ask": true, "then-force": true}
	flagOf := map[string]string{}
	for _, c := range commands() {
		f := newFlagSet(c)
		c.define(f)
		seen := map[string]bool{}
		for _, name := range f.order {
			env, ok := f.env[name]
			if !ok {
				if !perInvocation[name] {
					t.Errorf("lockscope %s --%s has no environment variable", c.name, name)
				}
				continue
			}
			if !strings.HasPrefix(env, "LOCKSCOPE_") || seen[env] {
				t.Errorf("lockscope %s --%s: variable %s is not LOCKSCOPE_* or is used twice", c.name, name, env)
			}
			seen[env] = true
			if prev, ok := flagOf[env]; ok && prev != name {
				t.Errorf("%s sets --%s in one command and --%s in another", env, prev, name)
			}
			flagOf[env] = name
		}
	}
	for _, env := range []string{"LOCKSCOPE_REDIS_URL", "LOCKSCOPE_LISTEN", "LOCKSCOPE_STREAM", "LOCKSCOPE_OPERATOR_USER",
		"LOCKSCOPE_OPERATOR_PASSWORD", "LOCKSCOPE_OPERATOR_TOKEN", "LOCKSCOPE_WATCH", "LOCKSCOPE_STUCK_AFTER", "LOCKSCOPE_LOG_LEVEL"} {
		if _, ok := flagOf[env]; !ok {
			t.Errorf("no flag reads %s", env)
		}
	}
}

func TestErrorIsOneLine(t *testing.T) {
	err := &Error{Cmd: "serve", Code: ExitFailure, Err: errors.New("redis said:\nLOADING  dataset\n")}
	if got, want := err.Error(), "lockscope serve: redis said: LOADING dataset"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if got := ExitCode(errors.New("x")); got != ExitFailure {
		t.Errorf("ExitCode(plain error) = %d, want %d", got, ExitFailure)
	}
	if got := ExitCode(nil); got != ExitOK {
		t.Errorf("ExitCode(nil) = %d, want 0", got)
	}
}

func TestMemoryLimitFollowsMaxKeys(t *testing.T) {
	for _, tc := range []struct {
		mb, keys int
		want     int64
	}{
		{0, 200_000, 64<<20 + 200_000<<10}, // the default: 259 MiB
		{0, 1_000_000, 64<<20 + 1_000_000<<10},
		{512, 200_000, 512 << 20},
		{-1, 200_000, 0},
	} {
		c := collectorConfig{memLimitMB: tc.mb, maxKeys: tc.keys}
		if got := c.memoryLimit(); got != tc.want {
			t.Errorf("memoryLimit(mb %d, keys %d) = %d, want %d", tc.mb, tc.keys, got, tc.want)
		}
	}
}

// --stuck-after takes a default and CLASS_GLOB=DURATION entries, repeated
// or comma-separated, from the environment or the command line; the
// command line's entries replace the environment's and the defaults'.
func TestStuckAfterEntries(t *testing.T) {
	defRules := []state.StuckRule{{Pattern: "workflow:*", After: 30 * time.Minute}}
	tests := []struct {
		name      string
		env       string
		args      []string
		wantDef   time.Duration
		wantRules []state.StuckRule
		wantError string
	}{
		{name: "defaults", wantDef: 20 * time.Second, wantRules: defRules},
		{name: "default only", args: []string{"--stuck-after", "5m"}, wantDef: 5 * time.Minute},
		{name: "repeated", args: []string{"--stuck-after", "5m", "--stuck-after", "edit:*=2h", "--stuck-after=batch:*=90m"},
			wantDef: 5 * time.Minute, wantRules: []state.StuckRule{{Pattern: "edit:*", After: 2 * time.Hour}, {Pattern: "batch:*", After: 90 * time.Minute}}},
		{name: "entry keeps the default threshold", args: []string{"--stuck-after", "edit:*=2h"},
			wantDef: 20 * time.Second, wantRules: []state.StuckRule{{Pattern: "edit:*", After: 2 * time.Hour}}},
		{name: "env comma-separated", env: "5m, edit:*=2h,report:[ab]*=1h", wantDef: 5 * time.Minute,
			wantRules: []state.StuckRule{{Pattern: "edit:*", After: 2 * time.Hour}, {Pattern: "report:[ab]*", After: time.Hour}}},
		{name: "command line replaces the env's entries", env: "5m,edit:*=2h", args: []string{"--stuck-after", "x:*=1h"},
			wantDef: 5 * time.Minute, wantRules: []state.StuckRule{{Pattern: "x:*", After: time.Hour}}},
		{name: "glob with =", args: []string{"--stuck-after", "a=b:*=3m"}, wantDef: 20 * time.Second,
			wantRules: []state.StuckRule{{Pattern: "a=b:*", After: 3 * time.Minute}}},
		{name: "bad duration", args: []string{"--stuck-after", "edit:*=2 hours"},
			wantError: `lockscope test: invalid value "edit:*=2 hours" for flag -stuck-after: entry "edit:*=2 hours": want CLASS_GLOB=DURATION with a duration such as 30s, 5m or 2h (run 'lockscope test -h')`},
		{name: "bare number", env: "5",
			wantError: `lockscope test: invalid value "5" for LOCKSCOPE_STUCK_AFTER: entry "5": want a duration such as 30s, 5m or 2h, or CLASS_GLOB=DURATION (run 'lockscope test -h')`},
		{name: "empty glob", args: []string{"--stuck-after", "=2h"},
			wantError: `lockscope test: invalid value "=2h" for flag -stuck-after: entry "=2h": the class glob is empty (run 'lockscope test -h')`},
		{name: "zero", args: []string{"--stuck-after", "edit:*=0s"},
			wantError: `lockscope test: invalid value "edit:*=0s" for flag -stuck-after: entry "edit:*=0s": the duration must be positive (run 'lockscope test -h')`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFlagSet(&command{name: "test"})
			var s stuckAfter
			f.StuckAfter(&s, "stuck-after", "LOCKSCOPE_STUCK_AFTER", 20*time.Second, defRules, "")
			_, err := f.parse(tt.args, lookup(map[string]string{"LOCKSCOPE_STUCK_AFTER": tt.env}))
			if tt.wantError != "" {
				if err == nil || err.Error() != tt.wantError {
					t.Fatalf("parse(%q) = %v, want %q", tt.args, err, tt.wantError)
				}
				return
			}
			if err != nil {
				t.Fatalf("parse(%q) = %v, want nil", tt.args, err)
			}
			if s.def != tt.wantDef {
				t.Errorf("parse(%q) default = %v, want %v", tt.args, s.def, tt.wantDef)
			}
			if diff := cmp.Diff(tt.wantRules, s.rules); diff != "" {
				t.Errorf("parse(%q) entries (-want +got):\n%s", tt.args, diff)
			}
		})
	}
}
