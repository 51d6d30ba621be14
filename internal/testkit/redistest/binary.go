package redistest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

type builtBin struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// lockscopeBin is built with -race when the tests run with it; plainBin
// never is.
var lockscopeBin, plainBin builtBin

// Lockscope returns the path of the lockscope binary built from this module
// (./cmd/lockscope), with -race when the test binary runs with the race
// detector. It builds on first use, once per test process, not in
// TestMain, so that listing the tests costs no build; Main removes it.
func Lockscope(tb testing.TB) string {
	tb.Helper()
	return lockscopeBin.build(tb, raceEnabled)
}

// LockscopePlain is Lockscope built as it ships, without the race detector
// whatever the tests run with: for a test that measures the binary's
// memory, which the race detector multiplies. Without -race it is
// Lockscope's binary.
func LockscopePlain(tb testing.TB) string {
	tb.Helper()
	if !raceEnabled {
		return Lockscope(tb)
	}
	return plainBin.build(tb, false)
}

func (b *builtBin) build(tb testing.TB, race bool) string {
	tb.Helper()
	b.once.Do(func() {
		if b.dir, b.err = os.MkdirTemp("", "lockscope-bin-"); b.err != nil {
			return
		}
		path := filepath.Join(b.dir, "lockscope")
		args := []string{"build", "-o", path}
		if race {
			args = append(args, "-race")
		}
		// Minutes: the first -race build of the module on two loaded cores.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, "go", append(args, "github.com/lockscope/lockscope/cmd/lockscope")...).CombinedOutput()
		if err != nil {
			b.err = fmt.Errorf("go build ./cmd/lockscope: %v\n%s", err, out)
			return
		}
		b.path = path
	})
	if b.err != nil {
		tb.Fatal(b.err)
	}
	return b.path
}

// removeLockscope removes the built binaries, if any.
func removeLockscope() {
	for _, b := range []*builtBin{&lockscopeBin, &plainBin} {
		if b.dir != "" {
			os.RemoveAll(b.dir)
		}
	}
}
