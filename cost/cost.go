// Package cost models what a function costs to run: FLOPs per node and memory
// over the schedule. Memory is simulated by liveness over the final body order:
// a value is allocated when its node runs and freed after its last reader, and a
// reshape is a view that keeps its source alive rather than a new buffer, in the
// IR's dtypes. For a GPU target the planned peak is not this simulation but the
// arena the executor allocates (see StepMemory); Simulate is the model of CPU
// targets and of steps without a GPU program.
package cost

import (
	"github.com/lcc-dev/lcc/ir"
)

// NodeFLOPs counts the floating-point operations of one node (multiply-adds count
// two). Data movement counts zero; elementwise ops count one per output element.
func NodeFLOPs(n *ir.Node) int64 { return n.FLOPs() }

// Memory is the result of a memory simulation.
type Memory struct {
	// PeakBytes is the most bytes live at once, weights and state included.
	PeakBytes int64
	// PeakAt is the index in Body at which the peak happens (-1: before the body).
	PeakAt int
	// WeightsBytes and StateBytes are the persistent parameters.
	WeightsBytes, StateBytes int64
	// InputBytes counts inputs and labels (live until their last use).
	InputBytes int64
	// HostBytes is the pinned host memory of offloaded values (ir.IsHost),
	// which are never live on the device.
	HostBytes int64
}

// Root returns the value whose buffer v uses: reshapes are views of their input.
func Root(v *ir.Value) *ir.Value {
	for v.Def != nil && v.Def.Op == ir.OpReshape {
		v = v.Def.Args[0]
	}
	return v
}

// Simulate walks f's body in order, allocating each result when its node runs and
// freeing each buffer after its last use (outputs stay live to the end).
// Offloaded values are host memory: HostBytes, never live.
func Simulate(f *ir.Func) Memory {
	m, _ := simulate(f)
	return m
}

// LiveBytes is Simulate's device bytes live while each node of f's body runs
// (its results allocated, nothing it is the last reader of freed yet).
func LiveBytes(f *ir.Func) []int64 {
	_, live := simulate(f)
	return live
}

func simulate(f *ir.Func) (Memory, []int64) {
	var m Memory
	series := make([]int64, len(f.Body))
	last := make(map[*ir.Value]int)
	for i, n := range f.Body {
		for _, a := range n.Args {
			last[Root(a)] = i
		}
	}
	for _, o := range f.Outputs {
		last[Root(o.Value)] = len(f.Body)
	}
	var live int64
	for _, p := range f.Params {
		sz := p.Value.Type.Bytes()
		switch p.Role {
		case ir.RoleWeight:
			m.WeightsBytes += sz
		case ir.RoleState:
			m.StateBytes += sz
		default:
			m.InputBytes += sz
		}
		live += sz
	}
	m.PeakBytes, m.PeakAt = live, -1
	freeAt := make(map[int][]*ir.Value)
	for v, i := range last {
		if v.Param == nil || (v.Param.Role != ir.RoleWeight && v.Param.Role != ir.RoleState) {
			freeAt[i] = append(freeAt[i], v)
		}
	}
	for i, n := range f.Body {
		for _, r := range n.Results {
			if ir.IsHost(r) {
				m.HostBytes += r.Type.Bytes()
				continue
			}
			if Root(r) == r {
				if _, used := last[r]; used {
					live += r.Type.Bytes()
				} else {
					// A result nobody reads is still written; count it for this step.
					live += r.Type.Bytes()
					freeAt[i] = append(freeAt[i], r)
				}
			}
		}
		series[i] = live
		if live > m.PeakBytes {
			m.PeakBytes, m.PeakAt = live, i
		}
		for _, v := range freeAt[i] {
			if !ir.IsHost(v) {
				live -= v.Type.Bytes()
			}
		}
	}
	return m, series
}

// SimulateStep is Simulate for a training step whose optimizer keeps
// optimizerBytes of persistent state (AdamW moments) that the step graph does
// not carry as parameters: the state is live throughout, so it adds to every
// point of the schedule and to the peak.
func SimulateStep(f *ir.Func, optimizerBytes int64) Memory {
	m := Simulate(f)
	m.PeakBytes += optimizerBytes
	m.StateBytes += optimizerBytes
	return m
}
