package cuda

import "github.com/lcc-dev/lcc/tensor"

// Work is what one step of a plan moves and computes, for the roofline
// profile (lcc train --profile): the bytes of the buffers it reads and writes
// in device memory, and for a GEMM its 2·M·N·K·batch FLOPs.
type Work struct {
	Bytes, FLOPs int64
}

// PlanWork is the Work of every step of plan, in step order. A step's bytes
// are the sizes of its arguments' buffers (an alias counts as the memory it
// names; an inlined constant as nothing), each argument counted once, so a
// buffer a kernel both reads and writes through two arguments counts twice,
// as it crosses twice. A kernel launched at k distinct element offsets into
// one buffer (a chunked loop) is taken to read a k-th of it per launch: the
// plan knows the offsets, not the extents, so that is an estimate, exact
// for equal chunks. It is what the kernels' arguments span, not what their
// caches refetch: a lower bound on the traffic of a kernel that rereads.
func PlanWork(plan *LaunchPlan) []Work {
	// An argument slot is (kernel, position, buffer): the same kernel launched
	// over chunks of one buffer shares a slot, which is how the chunks are found.
	type arg struct {
		kernel string
		pos    int
		buf    int
	}
	// offsets[a] is the set of element offsets argument a is launched at.
	offsets := map[arg]map[int64]bool{}
	for _, s := range plan.Steps {
		// Only kernels take per-launch element offsets (Step.Offs); GEMMs and copies
		// name their extents.
		if s.Kind != "kernel" || len(s.Offs) == 0 {
			continue
		}
		for j, id := range s.Args {
			if j < len(s.Offs) {
				a := arg{s.Kernel, j, id}
				if offsets[a] == nil {
					offsets[a] = map[int64]bool{}
				}
				offsets[a][s.Offs[j]] = true
			}
		}
	}
	bytes := func(id int) int64 {
		if id < 0 || id >= len(plan.Buffers) {
			return 0
		}
		b := plan.Buffers[id]
		if b.Kind == "inline" {
			return 0
		}
		return b.Bytes // an alias (a reshape) spans its own shape of its owner's memory
	}
	out := make([]Work, len(plan.Steps))
	for i, s := range plan.Steps {
		w := &out[i]
		switch s.Kind {
		// A GEMM's bytes come from its shape, not its arguments' buffers: a weight
		// broadcast over the batch is read once, and C may be read and written.
		case "gemm":
			if g := s.Gemm; g != nil {
				w.FLOPs = 2 * g.M * g.N * g.K * max(g.Batch, 1)
				w.Bytes = gemmBytes(s)
			}
			continue
		case "wait":
			continue // joins a copy or a collective: moves nothing itself
		}
		for j, id := range s.Args {
			n := bytes(id)
			if s.Kind == "kernel" && j < len(s.Offs) {
				// k launches at distinct offsets: each is taken to cover a k-th.
				if k := len(offsets[arg{s.Kernel, j, id}]); k > 1 {
					n /= int64(k)
				}
			}
			w.Bytes += n
		}
	}
	return out
}

// gemmBytes is what a GEMM's operands span: A and B read (once when their
// batch stride is 0: a weight broadcast over the batch), C written, and read
// too when it accumulates (Beta ≠ 0), in their storage dtypes.
func gemmBytes(s Step) int64 {
	g := s.Gemm
	size := func(dt string) int64 {
		t, err := tensor.ParseDType(dt)
		if err != nil {
			// An unknown dtype counts as 4 bytes (f32), the common case: an estimate,
			// not a refusal, since the profile only reports.
			return 4
		}
		return int64(t.Size())
	}
	es, cs := size(g.DType), size(g.DType)
	if g.CType != "" {
		cs = size(g.CType)
	}
	b := max(g.Batch, 1)
	ba, bb := b, b
	if g.StrideA == 0 {
		ba = 1
	}
	if g.StrideB == 0 {
		bb = 1
	}
	c := g.M * g.N * b * cs
	// β ≠ 0 reads C before it writes it: C crosses twice.
	if g.Beta != 0 {
		c *= 2
	}
	return (g.M*g.K*ba+g.K*g.N*bb)*es + c
}
