// Package fifotest makes named pipes for the tests that check lcc refuses them
// instead of hanging, and bounds how long such a test waits.
package fifotest

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// Make creates a named pipe called name in dir and returns its path; the test
// is skipped where the system has none.
func Make(t testing.TB, dir, name string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Skipf("no named pipes here: %v", err)
	}
	return path
}

// Within runs f and fails the test if it takes longer than d. Whatever blocked
// on one of the pipes is then set free, so a hang fails the test instead of
// blocking it forever. f runs on another goroutine: it must not call t.Fatal.
func Within(t testing.TB, d time.Duration, pipes []string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
		return
	case <-time.After(d):
	}
	for range 50 {
		for _, p := range pipes {
			// Both ends, non-blocking: a blocked reader gets a writer, a blocked
			// writer a reader; closing them gives it end of file or EPIPE.
			r, rerr := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
			if w, err := os.OpenFile(p, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
				w.Close()
			}
			if rerr == nil {
				r.Close()
			}
		}
		select {
		case <-done:
			t.Fatalf("still running after %v: it blocked on a named pipe (%v)", d, pipes)
		case <-time.After(100 * time.Millisecond):
		}
	}
	t.Fatalf("still running after %v, even with its named pipes (%v) set free", d, pipes)
}
