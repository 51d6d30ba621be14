package dashboard

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/a-h/templ"
	"golang.org/x/net/html"
)

// A few helpers to query rendered HTML the way a reader sees it: by
// data-testid, by tag, by text.

func renderHTML(t *testing.T, c templ.Component) *html.Node {
	t.Helper()
	var buf bytes.Buffer
	if err := c.Render(context.Background(), &buf); err != nil {
		t.Fatalf("Render() = %v", err)
	}
	return parseHTML(t, buf.String())
}

func parseHTML(t *testing.T, s string) *html.Node {
	t.Helper()
	n, err := html.Parse(strings.NewReader(s))
	if err != nil {
		t.Fatalf("html.Parse() = %v", err)
	}
	return n
}

func findAll(n *html.Node, match func(*html.Node) bool) []*html.Node {
	var out []*html.Node
	for c := range n.Descendants() {
		if c.Type == html.ElementNode && match(c) {
			out = append(out, c)
		}
	}
	return out
}

func byTestID(n *html.Node, id string) []*html.Node {
	return findAll(n, func(c *html.Node) bool { return attr(c, "data-testid") == id })
}

// one returns the single element with data-testid id.
func one(t *testing.T, n *html.Node, id string) *html.Node {
	t.Helper()
	got := byTestID(n, id)
	if len(got) != 1 {
		t.Fatalf("elements with data-testid=%q: %d, want 1", id, len(got))
	}
	return got[0]
}

func byTag(n *html.Node, tag string) []*html.Node {
	return findAll(n, func(c *html.Node) bool { return c.Data == tag })
}

func attr(n *html.Node, name string) string {
	for _, a := range n.Attr {
		if a.Key == name {
			return a.Val
		}
	}
	return ""
}

func hasAttr(n *html.Node, name string) bool {
	for _, a := range n.Attr {
		if a.Key == name {
			return true
		}
	}
	return false
}

// text is the element's text content with runs of white space collapsed.
func text(n *html.Node) string {
	var b strings.Builder
	for c := range n.Descendants() {
		if c.Type == html.TextNode {
			b.WriteString(c.Data)
		}
	}
	return strings.Join(strings.Fields(b.String()), " ")
}

// rawText is the element's text content exactly.
func rawText(n *html.Node) string {
	var b strings.Builder
	for c := range n.Descendants() {
		if c.Type == html.TextNode {
			b.WriteString(c.Data)
		}
	}
	return b.String()
}
