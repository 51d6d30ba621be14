package node

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// dir is this package's directory, where the npm package lives.
func dir(t testing.TB) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return wd
}

// checkNode fails the test when node or npm is missing or the package's
// dependencies are not installed: a missing tool is a failure, never a
// skip.
func checkNode(t testing.TB) {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if out, err := exec.Command(tool, "--version").CombinedOutput(); err != nil {
			t.Fatalf("%s --version: %v\n%s\ninstall it: bash scripts/deps.sh (apt-get install nodejs npm)", tool, err, out)
		}
	}
	for _, m := range []string{"ioredis", "redlock", "typescript"} {
		if _, err := os.Stat(filepath.Join(dir(t), "node_modules", m, "package.json")); err != nil {
			t.Fatalf("clients/node/node_modules/%s: %v\ninstall the package's dependencies: bash scripts/deps.sh (npm ci in clients/node)", m, err)
		}
	}
}

// nodeCmd runs a script of this package with node.
func nodeCmd(ctx context.Context, t testing.TB, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.CommandContext(ctx, "node", args...)
	cmd.Dir = dir(t)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

// TestNpmTest runs the package's own tests (clients/node/test) with npm
// test; each test file starts its own redis-server.
func TestNpmTest(t *testing.T) {
	checkNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "test", "--silent")
	cmd.Dir = dir(t)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("npm test: %v\n%s", err, out)
	}
	// node --test's summary: every test passed, none skipped, cancelled
	// or left to do.
	summary := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^# (tests|pass|fail|cancelled|skipped|todo) (\d+)$`).FindAllStringSubmatch(string(out), -1) {
		summary[m[1]] = m[2]
	}
	if summary["tests"] == "" || summary["tests"] == "0" || summary["pass"] != summary["tests"] {
		t.Fatalf("npm test summary %v: want every test passed\n%s", summary, out)
	}
	for _, k := range []string{"fail", "cancelled", "skipped", "todo"} {
		if summary[k] != "0" {
			t.Fatalf("npm test: %s %s, want 0\n%s", k, summary[k], out)
		}
	}
	if strings.Contains(string(out), "# SKIP") {
		t.Fatalf("npm test skipped a test\n%s", out)
	}
	t.Logf("npm test: %s tests passed", summary["pass"])
}
