// Package appmodule checks what an application that imports lockscope's
// library gets in its module graph: it builds such an application's module
// (in a temporary folder, with the library's modules replaced by this
// checkout's) with the real go command, and holds what it compiles and what
// its graph lists against an application that imports only go-redis and
// the adapted library.
package appmodule

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// libModules are lockscope's library modules, each in the folder its path
// names below the repository root.
var libModules = []string{"event", "lock", "internal/testkit", "extra/redsyncscope", "extra/redislockscope", "extra/lockotel"}

const root = "github.com/lockscope/lockscope"

// serverModules must never be in an application's graph: the server's
// dependencies, which the library modules exist to keep out of it.
var serverModules = []string{
	root, // the server itself
	"github.com/a-h/templ", "github.com/gorilla/mux", "github.com/prometheus/client_golang",
	"github.com/alicebob/miniredis", "github.com/chromedp/chromedp", "github.com/chromedp/cdproto",
}

func TestApplicationPullsOnlyWhatItUses(t *testing.T) {
	repo := repoRoot(t)
	for _, tc := range []struct {
		name    string
		imports []string // lockscope's packages the application imports
		direct  []string // what the same application imports without lockscope
	}{
		{"lock", []string{root + "/lock"}, []string{"github.com/redis/go-redis/v9"}},
		{"redsync", []string{root + "/lock", root + "/extra/redsyncscope"},
			[]string{"github.com/redis/go-redis/v9", "github.com/go-redsync/redsync/v4", "github.com/go-redsync/redsync/v4/redis/goredis/v9"}},
		{"redislock", []string{root + "/lock", root + "/extra/redislockscope"},
			[]string{"github.com/redis/go-redis/v9", "github.com/bsm/redislock"}},
		{"otel", []string{root + "/lock", root + "/extra/lockotel"},
			[]string{"github.com/redis/go-redis/v9", "go.opentelemetry.io/otel", "go.opentelemetry.io/otel/trace"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			app := newApp(t, repo, tc.imports)
			plain := newApp(t, repo, tc.direct)
			want := compiledModules(t, plain)
			got := compiledModules(t, app)
			for _, m := range got {
				if m == "example.com/app" || slices.Contains(want, m) {
					continue
				}
				if strings.HasPrefix(m, root+"/") && slices.Contains(libModules, strings.TrimPrefix(m, root+"/")) && m != root+"/internal/testkit" {
					continue
				}
				t.Errorf("the application compiles module %s, which neither lockscope's library nor %v needs", m, tc.direct)
			}
			if !slices.Contains(got, root+"/lock") || !slices.Contains(got, "github.com/redis/go-redis/v9") {
				t.Errorf("compiled modules %v: want lock and go-redis among them (is the check looking at the right thing?)", got)
			}
			graph := run(t, app, "go", "list", "-m", "-f", "{{.Path}}", "all")
			for _, m := range strings.Fields(graph) {
				for _, bad := range serverModules {
					if m == bad || strings.HasPrefix(m, bad+"/") && bad != root {
						t.Errorf("the application's module graph lists %s (go list -m all): a server dependency", m)
					}
				}
			}
		})
	}
}

// repoRoot is the folder of the root module's go.mod.
func repoRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	gomod := strings.TrimSpace(string(out))
	if filepath.Base(gomod) != "go.mod" {
		t.Fatalf("go env GOMOD = %q: not in a module", gomod)
	}
	return filepath.Dir(gomod)
}

// newApp writes an application module importing pkgs, with lockscope's
// library modules replaced by this checkout's, and tidies it.
func newApp(t *testing.T, repo string, pkgs []string) string {
	t.Helper()
	dir := t.TempDir()
	var mod bytes.Buffer
	mod.WriteString("module example.com/app\n\ngo 1.26.8\n\n")
	for _, m := range libModules {
		mod.WriteString("replace " + root + "/" + m + " => " + filepath.Join(repo, m) + "\n")
	}
	var src bytes.Buffer
	src.WriteString("package main\n\nimport (\n")
	for _, p := range pkgs {
		src.WriteString("\t_ \"" + p + "\"\n")
	}
	src.WriteString(")\n\nfunc main() {}\n")
	for name, b := range map[string][]byte{"go.mod": mod.Bytes(), "main.go": src.Bytes()} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The versions the root module uses are in the module cache and its
	// go.sum: the application resolves to them without a fresh download
	// where it can.
	run(t, dir, "go", "mod", "tidy")
	return dir
}

// compiledModules lists the modules whose packages building dir compiles.
func compiledModules(t *testing.T, dir string) []string {
	t.Helper()
	out := run(t, dir, "go", "list", "-deps", "-f", "{{if .Module}}{{.Module.Path}}{{end}}", ".")
	ms := strings.Fields(out)
	slices.Sort(ms)
	return slices.Compact(ms)
}

func run(t *testing.T, dir string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s in %s: %v\n%s", name, strings.Join(args, " "), dir, err, stderr.String())
	}
	return string(out)
}
