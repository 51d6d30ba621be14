// Package docs tests the documentation against the code: the README's
// library example is the lock package's Example_instrumented, and every
// relative link of README.md and docs/ resolves to a file (and heading).
package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

const root = "../.."

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, path))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestReadmeExampleIsTheExample: the README's Go block between its
// markers is, line for line, Example_instrumented's lines between "README
// begin" and "README end" (one tab less indented).
func TestReadmeExampleIsTheExample(t *testing.T) {
	readme := read(t, "README.md")
	const begin, end = "<!-- example: lock/example_instrumented_test.go Example_instrumented -->\n```go\n", "```\n<!-- end example -->"
	i := strings.Index(readme, begin)
	j := strings.Index(readme, end)
	if i < 0 || j < i {
		t.Fatalf("README.md has no block between %q and %q", begin, end)
	}
	shown := readme[i+len(begin) : j]

	src := read(t, "lock/example_instrumented_test.go")
	b := strings.Index(src, "// README begin")
	e := strings.Index(src, "// README end")
	if b < 0 || e < b {
		t.Fatal("lock/example_instrumented_test.go has no README begin/end markers")
	}
	lines := strings.Split(src[b:e], "\n")
	lines = lines[1 : len(lines)-1] // the marker lines
	var want strings.Builder
	for _, l := range lines {
		want.WriteString(strings.TrimPrefix(l, "\t") + "\n")
	}
	if shown != want.String() {
		t.Errorf("README.md's library example differs from Example_instrumented:\n--- README\n%s--- example\n%s", shown, want.String())
	}
	if n := strings.Count(shown, "\n"); n > 20 {
		t.Errorf("the README's library example is %d lines, want about ten", n)
	}
}

// TestReadmeShort: the README is a front page (at most ~250 lines), the
// reference lives in docs/.
func TestReadmeShort(t *testing.T) {
	if n := strings.Count(read(t, "README.md"), "\n"); n > 250 {
		t.Errorf("README.md has %d lines, want at most 250: move reference to docs/", n)
	}
}

var (
	linkRE    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	fenceRE   = regexp.MustCompile("(?ms)^```.*?^```")
	headingRE = regexp.MustCompile(`(?m)^#{1,6} +(.+?) *$`)
	codeRE    = regexp.MustCompile("`[^`]*`")
)

// slug is GitHub's anchor for a heading: lower case, punctuation but
// hyphens and underscores dropped, spaces to hyphens.
func slug(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func anchors(md string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, m := range headingRE.FindAllStringSubmatch(fenceRE.ReplaceAllString(md, ""), -1) {
		s := slug(m[1])
		if n := seen[s]; n > 0 {
			out[s+"-"+itoa(n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var d []byte
	for ; n > 0; n /= 10 {
		d = append([]byte{byte('0' + n%10)}, d...)
	}
	return string(d)
}

// TestLinksResolve: every relative link in README.md, docs/*.md and the
// clients' and chart's READMEs names a file or folder that exists, and its
// #anchor a heading of that page.
func TestLinksResolve(t *testing.T) {
	pages := []string{"README.md", "BENCHMARKS.md", "clients/python/README.md", "clients/node/README.md", "deploy/helm/lockscope/README.md"}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range docs {
		rel, _ := filepath.Rel(root, d)
		pages = append(pages, rel)
	}
	checked := 0
	for _, page := range pages {
		if _, err := os.Stat(filepath.Join(root, page)); os.IsNotExist(err) {
			continue // not every client has a README
		}
		md := read(t, page)
		text := codeRE.ReplaceAllString(fenceRE.ReplaceAllString(md, ""), "")
		for _, m := range linkRE.FindAllStringSubmatch(text, -1) {
			link := m[1]
			if strings.Contains(link, "://") || strings.HasPrefix(link, "mailto:") {
				continue
			}
			checked++
			target, anchor, _ := strings.Cut(link, "#")
			path := page
			if target != "" {
				path = filepath.Join(filepath.Dir(page), target)
				if _, err := os.Stat(filepath.Join(root, path)); err != nil {
					t.Errorf("%s: link %q: %s does not exist", page, link, path)
					continue
				}
			}
			if anchor == "" || !strings.HasSuffix(path, ".md") {
				continue
			}
			if !anchors(read(t, path))[anchor] {
				t.Errorf("%s: link %q: %s has no heading #%s", page, link, path, anchor)
			}
		}
	}
	if checked < 50 {
		t.Errorf("checked %d links, want the docs' many: is the link pattern wrong?", checked)
	}
}
