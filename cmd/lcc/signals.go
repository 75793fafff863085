package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/lcc-dev/lcc/train"
)

// stopper turns SIGINT (Ctrl-C) and SIGTERM (a scheduler's preemption) into a
// request that training stop after the step in flight, with a checkpoint. A
// second signal exits at once, as a user pressing Ctrl-C twice expects.
type stopper struct {
	// stop is closed on the first signal; training polls it between steps.
	stop chan struct{}
	sigs chan os.Signal

	// got is read by the command after training returns, from another goroutine.
	mu  sync.Mutex
	got os.Signal
}

// stopOnSignals starts catching the signals; release stops it.
func stopOnSignals(log io.Writer) *stopper {
	// Room for two signals: signal.Notify drops what the channel cannot take, and
	// the second one is the one that must not be lost.
	s := &stopper{stop: make(chan struct{}), sigs: make(chan os.Signal, 2)}
	signal.Notify(s.sigs, syscall.SIGINT, syscall.SIGTERM)
	// The goroutine, not the training loop, reacts: a second signal must exit even
	// while a step runs, and the loop only looks between steps.
	go func() {
		for sig := range s.sigs {
			s.mu.Lock()
			first := s.got == nil
			if first {
				s.got = sig
			}
			s.mu.Unlock()
			if !first {
				fmt.Fprintf(log, "lcc: %s again: exiting now, without a checkpoint of this step\n", signalName(sig))
				os.Exit(exitStatus(sig))
			}
			fmt.Fprintf(log, "lcc: %s: stopping after this step (with a checkpoint under --checkpoint-dir); "+
				"once more to exit now\n", signalName(sig))
			// Close, not send: every reader of stop sees it, and only the first signal gets here.
			close(s.stop)
		}
	}()
	return s
}

// release stops catching the signals.
func (s *stopper) release() {
	signal.Stop(s.sigs)
	// Closing ends the goroutine's range loop; Stop first so no send hits a closed channel.
	close(s.sigs)
}

// signal is the signal that asked to stop, or nil.
func (s *stopper) signal() os.Signal {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.got
}

// exitStatus is the shell's status for a process ended by sig: 128 + its number.
func exitStatus(sig os.Signal) int {
	if n, ok := sig.(syscall.Signal); ok {
		// Shells and schedulers read 128+N as "killed by signal N" and may requeue on it.
		return 128 + int(n)
	}
	return 1
}

// signalName is the conventional name of sig, for the stop message.
func signalName(sig os.Signal) string {
	switch sig {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return sig.String()
}

// stopped is the error of a run that a signal stopped (nil for one that was not):
// its exit status is the signal's, and its message says where the checkpoint
// is, or that there is none (without --checkpoint-dir).
func stopped(s *stopper, res *train.Result, checkpoints bool) error {
	sig := s.signal()
	// A signal that came after the last step did not stop anything: the run completed.
	if sig == nil || !res.Stopped {
		return nil
	}
	msg := fmt.Sprintf("%s: stopped after step %d", signalName(sig), res.Step)
	switch {
	case len(res.Checkpoints) > 0:
		msg += fmt.Sprintf("; checkpoint: %s (continue with --resume)", res.Checkpoints[len(res.Checkpoints)-1])
	case checkpoints:
		msg += "; no checkpoint was written"
	default:
		msg += "; no checkpoint (no --checkpoint-dir)"
	}
	return &exitError{code: exitStatus(sig), err: errors.New(msg)}
}
