package exec

import (
	"errors"
	"fmt"

	codegen "github.com/lcc-dev/lcc/codegen/cuda"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/runtime/comm"
	"github.com/lcc-dev/lcc/runtime/cuda"
	"github.com/lcc-dev/lcc/tensor"
)

// checkRanks refuses a program sharded over ranks that the communicator does not
// have, before anything is allocated.
func checkRanks(f *ir.Func, c comm.Device) error {
	for _, n := range f.Body {
		r := ir.Ranks(n)
		if r <= 1 && n.Op != ir.OpShardPositions {
			continue
		}
		switch {
		case c == nil && r > 1:
			return fmt.Errorf("exec: %s is sharded for %d ranks, but the session has no communicator "+
				"(exec.Options.Comm)", n.Where(), r)
		case c != nil && c.Size() != r:
			return fmt.Errorf("exec: %s is sharded for %d ranks, but the communicator has %d", n.Where(), r,
				c.Size())
		}
	}
	return nil
}

// collective queues one collective step on the communicator's stream, ordered
// after the compute stream's work so far, and keeps its Done event for the wait
// step that joins it (codegen places that before the first reader of the
// result, and its arena plan keeps the collective's buffers alive until then).
func (r *runner) collective(f *ir.Func, s codegen.Step) error {
	c, k := r.opts.Comm, s.Coll
	if c == nil {
		return errors.New("the program communicates, but the session has no communicator (exec.Options.Comm)")
	}
	if k == nil || len(s.Args) < 2 {
		return errors.New("lcc: BUG: collective step without its operands")
	}
	dt, err := tensor.ParseDType(k.DType)
	if err != nil {
		return err
	}
	if err := r.afterStream(c.After); err != nil {
		return err
	}
	op := fmt.Sprintf("%s (node %d)", s.Op, s.Node)
	if s.Node >= 0 && s.Node < len(f.Body) {
		op = f.Body[s.Node].Where()
	}
	in, out, count := r.ptr(s.Args[0]), r.ptr(s.Args[1]), int(k.Count)
	n, rank := c.Size(), c.Rank()
	switch k.Op {
	case "all_reduce", "reduce_scatter":
		red := map[string]cuda.ReduceOp{"sum": cuda.Sum, "max": cuda.Max, "min": cuda.Min}[k.Reduce]
		if k.Reduce != "sum" && red == cuda.Sum {
			return fmt.Errorf("unknown reduction %q", k.Reduce)
		}
		if k.Op == "all_reduce" {
			err = c.AllReduceDevice(op, in, out, count, dt, red)
		} else {
			err = c.ReduceScatterDevice(op, in, out, count, dt, red)
		}
	case "all_gather":
		err = c.AllGatherDevice(op, in, out, count, dt)
	case "all_to_all":
		counts, offs := make([]int, n), make([]int, n)
		for i := range n {
			counts[i], offs[i] = count, i*count
		}
		err = c.AllToAllDevice(op, in, counts, offs, out, counts, offs, dt)
	case "send_recv":
		sh := int(k.Shift)
		err = c.SendRecvDevice(op, in, count, (rank+sh)%n, out, count, (rank-sh+n)%n, dt)
	default:
		err = fmt.Errorf("unknown collective %q", k.Op)
	}
	if err != nil {
		return err
	}
	done, err := c.Done()
	if err != nil {
		return err
	}
	r.setPending(s, done)
	return nil
}

// pendingKey names a queued collective or copy: its node and its result
// buffer (a node such as ring attention queues several, each into its own
// buffer).
type pendingKey struct{ node, out int }

// setPending keeps done, the event after the collective or copy s, for the
// wait step that joins it.
func (r *runner) setPending(s codegen.Step, done *cuda.Event) {
	if r.pending == nil {
		r.pending = map[pendingKey]*cuda.Event{}
	}
	key := pendingKey{s.Node, s.Args[1]}
	if old := r.pending[key]; old != nil {
		old.Destroy()
	}
	r.pending[key] = done
}

// wait makes the compute stream wait for the collective or copy that s joins.
func (r *runner) wait(s codegen.Step) error {
	if len(s.Args) < 2 {
		return errors.New("lcc: BUG: a wait step without its operands")
	}
	key := pendingKey{s.Node, s.Args[1]}
	done := r.pending[key]
	if done == nil {
		return errors.New("lcc: BUG: a wait step without its collective or copy")
	}
	delete(r.pending, key)
	defer done.Destroy() // released once the compute stream's wait is satisfied
	return r.stream.Wait(done)
}

// dropPending releases the events of collectives a failed launch never joined.
func (r *runner) dropPending() {
	for n, e := range r.pending {
		e.Destroy()
		delete(r.pending, n)
	}
}
