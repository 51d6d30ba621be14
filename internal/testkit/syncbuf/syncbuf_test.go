package syncbuf

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

func TestConcurrentWritesAreKeptWhole(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 100 {
				fmt.Fprintf(&b, "w%d-%d\n", i, j)
				_ = b.String()
			}
		})
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != 800 {
		t.Fatalf("got %d lines, want 800", len(lines))
	}
	seen := map[string]bool{}
	for _, l := range lines {
		seen[l] = true
	}
	if len(seen) != 800 || !seen["w7-99"] {
		t.Fatalf("got %d distinct lines (w7-99 present: %v), want 800", len(seen), seen["w7-99"])
	}
}
