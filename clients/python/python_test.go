package python

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockscope/lockscope/internal/testkit/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// python is Debian's own interpreter, whose packages python3-redis and
// python3-pytest scripts/deps.sh installs: not a python3 earlier on PATH
// (pyenv), which has neither.
const python = "/usr/bin/python3"

// dir is this package's directory, where the Python package lives.
func dir(t testing.TB) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return wd
}

// checkPython fails the test when Debian's python3 cannot import redis-py
// and pytest: a missing tool is a failure, never a skip.
func checkPython(t testing.TB) {
	t.Helper()
	out, err := exec.Command(python, "-c", "import redis, pytest; print(redis.__version__)").CombinedOutput()
	if err != nil {
		t.Fatalf("%s cannot import redis and pytest: %v\n%s\ninstall them: bash scripts/deps.sh (apt-get install python3-redis python3-pytest)", python, err, out)
	}
}

// pythonCmd runs a Python file of this package with the package importable.
func pythonCmd(ctx context.Context, t testing.TB, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.CommandContext(ctx, python, args...)
	cmd.Dir = dir(t)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+dir(t), "PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

// TestPytest runs the Python package's own tests (clients/python/tests)
// with pytest; each starts its own redis-server.
func TestPytest(t *testing.T) {
	checkPython(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := pythonCmd(ctx, t, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("pytest: %v\n%s", err, out)
	}
	last := strings.TrimSpace(string(out))
	if i := strings.LastIndexByte(last, '\n'); i >= 0 {
		last = last[i+1:]
	}
	// "56 passed in 12.3s": anything skipped, xfailed or deselected fails.
	if !strings.Contains(last, " passed") || strings.ContainsAny(strings.Split(last, " in ")[0], ",") {
		t.Fatalf("pytest summary %q: want only passed tests\n%s", last, out)
	}
	t.Log(last)
}

// TestPipInstall: the package installs with pip from its pyproject.toml
// (offline, with Debian's setuptools: no package index is reachable in CI)
// and imports from where it was installed.
func TestPipInstall(t *testing.T) {
	checkPython(t)
	src, target := t.TempDir(), t.TempDir()
	// A copy: the build would leave its build/ directory in the tree.
	if err := os.CopyFS(src, os.DirFS(dir(t))); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, python, "-m", "pip", "install", "--no-build-isolation", "--no-index", "--no-deps",
		"--disable-pip-version-check", "--quiet", "--target", target, src).CombinedOutput()
	if err != nil {
		t.Fatalf("pip install: %v\n%s\n(scripts/deps.sh installs python3-pip and python3-setuptools)", err, out)
	}
	cmd := exec.CommandContext(ctx, python, "-c", "import lockscope, lockscope.asyncio; print(lockscope.__file__, lockscope.__version__)")
	cmd.Dir = target
	cmd.Env = append(os.Environ(), "PYTHONPATH="+target, "PYTHONDONTWRITEBYTECODE=1")
	out, err = cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("import the installed package: %v\n%s", err, out)
	}
	if want := target + "/lockscope/__init__.py 0.1.0\n"; string(out) != want {
		t.Errorf("installed package = %q, want %q", out, want)
	}
}
