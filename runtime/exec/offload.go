package exec

import (
	"errors"
	"fmt"

	codegen "github.com/lcc-dev/lcc/codegen/cuda"
	"github.com/lcc-dev/lcc/internal/hostmem"
	"github.com/lcc-dev/lcc/runtime/cuda"
)

// Activation offload (codegen/cuda/offload.go): a program with "d2h" and "h2d"
// steps keeps its offloaded values in one pinned host block (codegen.HostLayout)
// that the runner allocates beside its arena, and runs the copies on the
// session's copy stream. Each copy waits for the compute stream's work queued
// before it (an event), so it reads a finished value (d2h) or writes a slot whose
// earlier users are done (h2d); its done event is joined into the compute stream
// by the plan's wait step, before the first reader of a prefetched value and
// before an offloaded value's slot can be reused. One copy stream runs the
// copies in plan order, so a run's d2h into a host place follows the previous
// run's h2d out of it.

// hasCopies reports whether plan copies values between device and host.
func hasCopies(plan *codegen.LaunchPlan) bool {
	for _, s := range plan.Steps {
		if s.Kind == "d2h" || s.Kind == "h2d" {
			return true
		}
	}
	return false
}

// allocHost allocates r's pinned host block for its plan's host buffers.
func (r *runner) allocHost() error {
	offs, size := codegen.HostLayout(r.plan)
	if size == 0 {
		return nil
	}
	const hint = " (the step offloads checkpointed activations: try a --checkpoint policy without " +
		"+offload, a shorter --seq-len or more GPUs)"
	// Pinning more than the host has would push the process out of memory, not fail.
	if avail, src, err := hostmem.Available(); err == nil && size > avail {
		return fmt.Errorf("exec: the offloaded activations need %d bytes (%.2f GiB) of pinned host memory, "+
			"but the host has %d bytes (%.2f GiB) available (%s)%s", size, float64(size)/(1<<30), avail,
			float64(avail)/(1<<30), src, hint)
	}
	h, err := r.dev.AllocHost(int(size))
	if err != nil {
		return fmt.Errorf("exec: %d bytes (%.2f GiB) of pinned host memory for offloaded activations%s: %w",
			size, float64(size)/(1<<30), hint, err)
	}
	r.host, r.hostOffs = h, offs
	return nil
}

// poisonHost fills the host block with 0xff bytes (NaN in every float dtype),
// so that a prefetch of a place no offload wrote shows up in tests.
func (r *runner) poisonHost() {
	if r.host == nil {
		return
	}
	b := r.host.Bytes()
	for i := range b {
		b[i] = 0xff
	}
}

// afterStream makes other work wait for what is queued on the session's stream
// so far: it records an event there and hands it to wait (a stream's Wait, a
// communicator's After).
func (r *runner) afterStream(wait func(*cuda.Event) error) error {
	ready, err := r.dev.NewEvent()
	if err != nil {
		return err
	}
	defer ready.Destroy() // released once the recorded work completes
	if err := ready.Record(r.stream); err != nil {
		return err
	}
	return wait(ready)
}

// copyStep queues the d2h or h2d copy of step s on the copy stream after the
// compute stream's work so far, and keeps its done event for the wait step.
func (r *runner) copyStep(s codegen.Step) error {
	if r.copy == nil || r.host == nil || len(s.Args) < 2 {
		return errors.New("lcc: BUG: copy step without its copy stream, host block or operands")
	}
	if err := r.afterStream(r.copy.Wait); err != nil {
		return err
	}
	src, dst := s.Args[0], s.Args[1]
	var err error
	if s.Kind == "d2h" {
		b := r.plan.Buffers[dst]
		err = r.copy.CopyDtoHAsync(r.host, int(r.hostOffs[dst]), r.ptr(src), int(b.Bytes))
	} else {
		b := r.plan.Buffers[src]
		err = r.copy.CopyHtoDAsync(r.ptr(dst), r.host, int(r.hostOffs[src]), int(b.Bytes))
	}
	if err != nil {
		return err
	}
	done, err := r.dev.NewEvent()
	if err != nil {
		return err
	}
	if err := done.Record(r.copy); err != nil {
		done.Destroy()
		return err
	}
	r.setPending(s, done)
	return nil
}
