package nccl

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fakeBackend stands in for NCCL: an async error to report and a count of aborts.
type fakeBackend struct {
	async  atomic.Value // error
	aborts atomic.Int32
}

func (f *fakeBackend) asyncError() error {
	if e, ok := f.async.Load().(error); ok {
		return e
	}
	return nil
}

func (f *fakeBackend) abort() error { f.aborts.Add(1); return nil }

type causeOf struct{ err atomic.Value }

func (c *causeOf) Cause() error {
	if e, ok := c.err.Load().(error); ok {
		return e
	}
	return nil
}

func newTestWatchdog(timeout time.Duration, m Monitor) (*watchdog, *fakeBackend) {
	b := &fakeBackend{}
	return newWatchdog(timeout, time.Millisecond, m, b.asyncError, b.abort), b
}

// TestWatchdogCompletes: ops that complete are released and wait returns.
func TestWatchdogCompletes(t *testing.T) {
	w, b := newTestWatchdog(time.Second, nil)
	defer w.close()
	var released atomic.Int32
	for range 3 {
		p, err := w.begin("all_reduce")
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		w.queued(p, func() (bool, error) { return time.Since(start) > 5*time.Millisecond, nil },
			func() { released.Add(1) })
	}
	if err := w.wait(); err != nil {
		t.Fatal(err)
	}
	if released.Load() != 3 || b.aborts.Load() != 0 {
		t.Errorf("released %d, aborts %d", released.Load(), b.aborts.Load())
	}
}

// TestWatchdogTimeout: an op that never completes (a hung peer) aborts the
// communicator after the timeout, and every later call fails with that cause.
func TestWatchdogTimeout(t *testing.T) {
	w, b := newTestWatchdog(50*time.Millisecond, nil)
	defer w.close()
	p, _ := w.begin("ring_attention node_7")
	w.queued(p, func() (bool, error) { return false, nil }, nil)
	start := time.Now()
	err := w.wait()
	if err == nil || !strings.Contains(err.Error(), "ring_attention node_7: not complete after 50ms") {
		t.Fatalf("got %v", err)
	}
	if el := time.Since(start); el > time.Second {
		t.Errorf("took %v", el)
	}
	if b.aborts.Load() != 1 {
		t.Errorf("%d aborts, want 1 (ncclCommAbort)", b.aborts.Load())
	}
	if _, err := w.begin("next"); err == nil {
		t.Error("a call after the abort was accepted")
	}
}

// TestWatchdogBlockedEnqueue: an op still queuing (blocked inside NCCL) also
// times out, so the abort can free it.
func TestWatchdogBlockedEnqueue(t *testing.T) {
	w, b := newTestWatchdog(30*time.Millisecond, nil)
	defer w.close()
	w.begin("send/recv")
	select {
	case <-w.dead:
	case <-time.After(2 * time.Second):
		t.Fatal("the watchdog did not fire")
	}
	if b.aborts.Load() != 1 {
		t.Errorf("%d aborts", b.aborts.Load())
	}
}

// TestWatchdogMonitor: a monitor that names a dead rank ends the communicator
// with its cause, long before the timeout.
func TestWatchdogMonitor(t *testing.T) {
	m := &causeOf{}
	w, b := newTestWatchdog(time.Minute, m)
	defer w.close()
	p, _ := w.begin("all_gather")
	w.queued(p, func() (bool, error) { return false, nil }, nil)
	go func() {
		time.Sleep(20 * time.Millisecond)
		m.err.Store(errors.New("the connection to rank 3 broke without its goodbye"))
	}()
	start := time.Now()
	err := w.wait()
	if err == nil || !strings.Contains(err.Error(), "rank 3") || time.Since(start) > time.Second {
		t.Errorf("got %v after %v", err, time.Since(start))
	}
	if b.aborts.Load() != 1 {
		t.Errorf("%d aborts", b.aborts.Load())
	}
}

// TestWatchdogAsyncError: NCCL's asynchronous error aborts the communicator.
func TestWatchdogAsyncError(t *testing.T) {
	w, b := newTestWatchdog(time.Minute, nil)
	defer w.close()
	p, _ := w.begin("reduce_scatter")
	w.queued(p, func() (bool, error) { return false, nil }, nil)
	b.async.Store(errors.New("ncclRemoteError"))
	err := w.wait()
	if err == nil || !strings.Contains(err.Error(), "ncclRemoteError") {
		t.Errorf("got %v", err)
	}
}
