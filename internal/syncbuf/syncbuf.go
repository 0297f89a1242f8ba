// Package syncbuf is a text buffer that goroutines may write while a test
// reads it: a daemon's log, a command's output copied by os/exec's
// goroutine. It is for tests; the zero Buffer is empty and ready.
package syncbuf

import (
	"strings"
	"sync"
)

// Buffer is a strings.Builder behind a mutex.
type Buffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String is what was written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
