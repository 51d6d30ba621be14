package main

import (
	"os/user"
	"strings"
	"testing"
	"time"

	"github.com/lockscope/lockscope/internal/testkit/redistest"
	"github.com/lockscope/lockscope/lock"
)

// TestReleaseRecordsWhoRanIt: `release` without --operator-user, from a
// shell that sets neither $USER nor $LOGNAME (a container's), records the
// name of the account that ran it, never a made-up "cli" (before); with
// $USER set, that name.
func TestReleaseRecordsWhoRanIt(t *testing.T) {
	t.Parallel()
	u, err := user.Current()
	if err != nil || u.Username == "" {
		t.Fatalf("user.Current() = %v, %v: the test needs a named account", u, err)
	}
	srv := redistest.Start(t, redistest.Options{})
	lc := lock.New(srv.Client(t), nil)
	for _, c := range []struct {
		env  []string
		want string
	}{
		{[]string{"USER=", "LOGNAME="}, u.Username},
		{[]string{"USER=oncall-bo", "LOGNAME=x"}, "oncall-bo"},
	} {
		key := "job:" + c.want
		hold(t, lc, key, "worker", time.Minute)
		env := append([]string{"LOCKSCOPE_REDIS_URL=" + srv.URL()}, c.env...)
		out, errOut, code := lockscope(t, env, "", "release", key, "--reason", "stuck", "--yes")
		if code != 0 || !strings.Contains(out, "recorded as forced by "+c.want+":") {
			t.Errorf("release with %v = %d\n%s%s\nwant it recorded as forced by %s", c.env, code, out, errOut, c.want)
		}
	}
}

// TestLoadScenariosAll: `load --scenarios all`, the default as the help
// and docs/configuration.md name it, runs every scenario (before: exit 2, unknown
// scenario "all").
func TestLoadScenariosAll(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	out, errOut, code := lockscope(t, []string{"LOCKSCOPE_REDIS_URL=" + srv.URL()}, "", "load", "--scenarios", "all", "--duration", "1s")
	if code != 0 || !strings.Contains(out+errOut, "scenarios: cron_ticks=") {
		t.Errorf("load --scenarios all = %d\n%s%s\nwant it to run and report its scenarios", code, out, errOut)
	}
}
