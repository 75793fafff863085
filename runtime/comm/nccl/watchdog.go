package nccl

import (
	"fmt"
	"sync"
	"time"
)

// watchdog tracks the collectives a communicator has queued and ends the
// communicator when one cannot complete, as PyTorch's ProcessGroupNCCL watchdog
// does: a goroutine polls, every poll interval, the monitor (a control channel
// that names a dead peer), NCCL's asynchronous error, and the age of the oldest
// unfinished collective. The first of the three that reports a failure aborts
// the communicator (ncclCommAbort, which also frees any thread blocked inside
// NCCL) and becomes the cause every later call returns.
//
// It is separate from the GPU so that its logic is tested on the CPU.
type watchdog struct {
	timeout, poll time.Duration
	monitor       Monitor
	asyncError    func() error // the backend's pending asynchronous error, or nil
	abort         func() error // ncclCommAbort

	mu      sync.Mutex
	pending []*pendingOp
	cause   error
	dead    chan struct{} // closed by fail
	stop    chan struct{}
	stopped chan struct{}
}

// pendingOp is one queued collective.
type pendingOp struct {
	op    string
	start time.Time
	// done reports completion (cuEventQuery); nil while the call is still queuing.
	done func() (bool, error)
	// release frees what the op holds (its event) once it completed.
	release func()
}

func newWatchdog(timeout, poll time.Duration, m Monitor, asyncError, abort func() error) *watchdog {
	w := &watchdog{timeout: timeout, poll: poll, monitor: m, asyncError: asyncError, abort: abort,
		dead: make(chan struct{}), stop: make(chan struct{}), stopped: make(chan struct{})}
	go w.run()
	return w
}

// begin registers a collective about to be queued.
func (w *watchdog) begin(op string) (*pendingOp, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cause != nil {
		return nil, w.cause
	}
	p := &pendingOp{op: op, start: time.Now()}
	w.pending = append(w.pending, p)
	return p, nil
}

// queued records how to tell that p has completed.
func (w *watchdog) queued(p *pendingOp, done func() (bool, error), release func()) {
	w.mu.Lock()
	p.done, p.release = done, release
	w.mu.Unlock()
}

// err returns the cause of the failure, or nil.
func (w *watchdog) err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cause
}

// fail aborts the communicator with cause (the first cause wins).
func (w *watchdog) fail(cause error) {
	w.mu.Lock()
	if w.cause != nil {
		w.mu.Unlock()
		return
	}
	w.cause = cause
	close(w.dead)
	w.mu.Unlock()
	w.abort()
}

// check runs one round of the watchdog's tests.
func (w *watchdog) check() {
	if w.monitor != nil {
		if c := w.monitor.Cause(); c != nil {
			w.fail(fmt.Errorf("nccl: %w", c))
			return
		}
	}
	if err := w.asyncError(); err != nil {
		w.fail(fmt.Errorf("nccl: asynchronous error (a peer failed or its connection broke): %w", err))
		return
	}
	w.mu.Lock()
	var keep []*pendingOp
	var late *pendingOp
	for _, p := range w.pending {
		if p.done != nil {
			ok, err := p.done()
			if err != nil {
				w.mu.Unlock()
				w.fail(fmt.Errorf("nccl: %s: %w", p.op, err))
				return
			}
			if ok {
				if p.release != nil {
					p.release()
				}
				continue
			}
		}
		if late == nil && time.Since(p.start) > w.timeout {
			late = p
		}
		keep = append(keep, p)
	}
	w.pending = keep
	w.mu.Unlock()
	if late != nil {
		w.fail(fmt.Errorf("nccl: %s: not complete after %v (watchdog): a rank hangs, died, or runs "+
			"a different program", late.op, w.timeout))
	}
}

// idle reports whether every queued collective has completed (after a check).
func (w *watchdog) idle() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.pending) == 0
}

func (w *watchdog) run() {
	defer close(w.stopped)
	t := time.NewTicker(w.poll)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-w.dead:
			return
		case <-t.C:
			w.check()
		}
	}
}

// wait blocks until every queued collective has completed or the watchdog has
// failed the communicator.
func (w *watchdog) wait() error {
	for {
		w.check()
		if err := w.err(); err != nil {
			return err
		}
		if w.idle() {
			return nil
		}
		select {
		case <-w.dead:
		case <-time.After(w.poll):
		}
	}
}

// close stops the watchdog goroutine.
func (w *watchdog) close() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.stopped
}
