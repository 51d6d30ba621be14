// Package syncbuf is a bytes.Buffer that is safe to write from one goroutine
// (a child process, a logger) while tests read it from another.
package syncbuf

import (
	"bytes"
	"sync"
)

// Buffer collects output; its zero value is ready to use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
