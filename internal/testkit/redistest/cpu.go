package redistest

import (
	"context"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// ServerCPU returns the CPU time (user + system) the redis-server behind
// rdb has used so far, from INFO cpu: benchmarks report what a step costs
// Redis, which the machine's load moves less than wall time.
func ServerCPU(tb testing.TB, rdb redis.UniversalClient) time.Duration {
	tb.Helper()
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		tb.Fatal(err)
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if k == "used_cpu_user" || k == "used_cpu_sys" {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				tb.Fatal(err)
			}
			total += f
		}
	}
	return time.Duration(total * float64(time.Second))
}

// SelfCPU returns this process's CPU time (user + system) so far.
func SelfCPU(tb testing.TB) time.Duration {
	tb.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// CommandTime returns the time Redis has spent running command (lower
// case, as INFO commandstats names it: "xadd", "evalsha") and how many
// calls it counted, both since the server started. Redis times a command
// by its wall clock, so a loaded machine inflates this less than it does a
// benchmark's wall time (only the command's own run, not the waits around
// it) but more than CPU time.
func CommandTime(tb testing.TB, rdb redis.UniversalClient, command string) (time.Duration, int64) {
	tb.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if k != "cmdstat_"+command {
			continue
		}
		var usec, calls int64
		for _, kv := range strings.Split(v, ",") {
			name, n, _ := strings.Cut(kv, "=")
			switch name {
			case "usec":
				usec, err = strconv.ParseInt(n, 10, 64)
			case "calls":
				calls, err = strconv.ParseInt(n, 10, 64)
			}
			if err != nil {
				tb.Fatalf("INFO commandstats: %q: %v", line, err)
			}
		}
		return time.Duration(usec) * time.Microsecond, calls
	}
	return 0, 0 // not run yet
}
