package exec

import (
	"fmt"
	"maps"
	"time"

	codegen "github.com/lcc-dev/lcc/codegen/cuda"
	"github.com/lcc-dev/lcc/runtime/cuda"
)

// profiler times launches with CUDA events by kernel family (Options.Profile):
// a run records an event before each launch and one after the last, and, once
// the stream has synchronised, adds the time between consecutive events to the
// family of the launch between them. Events are pooled and reused.
type profiler struct {
	dev    *cuda.Device
	events []*cuda.Event
	byFam  map[string]time.Duration
	// fams is the roofline tally (Session.Roofline), kept apart from byFam so
	// that each has its own reader.
	fams map[string]Family
}

// Family is what the profiled runs of one kernel family did: GPU time, the
// launches, the bytes their buffers span and the FLOPs of their GEMMs
// (codegen.PlanWork; the optimizer's own for "optim.*").
type Family struct {
	// Kind is the plan's step kind of the family ("kernel", "gemm",
	// "collective", "d2h", "h2d"; "optim" for the optimizer's kernels): what
	// its roofline is.
	Kind         string
	Time         time.Duration
	Launches     int
	Bytes, FLOPs int64
}

// span is what runs between two marks of the profiler: a family's launches
// and their work.
type span struct {
	fam, kind string
	launches  int
	work      codegen.Work
}

// planSpans is one span per step of plan: its family (the step's Op, else
// its kind), one launch, and its work.
func planSpans(plan *codegen.LaunchPlan) []span {
	work := codegen.PlanWork(plan)
	out := make([]span, len(plan.Steps))
	for i, s := range plan.Steps {
		out[i] = span{fam: s.Op, kind: s.Kind, launches: 1, work: work[i]}
		if out[i].fam == "" {
			out[i].fam = s.Kind
		}
	}
	return out
}

// mark records event k of the current run on st.
func (p *profiler) mark(k int, st *cuda.Stream) error {
	for len(p.events) <= k {
		e, err := p.dev.NewEvent()
		if err != nil {
			return fmt.Errorf("exec: profile: %w", err)
		}
		p.events = append(p.events, e)
	}
	return p.events[k].Record(st)
}

// collect adds the time between marks i and i+1 to spans[i]'s family, with
// its launches and work; the stream must have synchronised.
func (p *profiler) collect(spans []span) error {
	for i, sp := range spans {
		d, err := p.events[i+1].Since(p.events[i])
		if err != nil {
			return fmt.Errorf("exec: profile: %w", err)
		}
		p.byFam[sp.fam] += d
		f := p.fams[sp.fam]
		if f.Kind == "" || f.Kind == "wait" {
			f.Kind = sp.kind // a wait joins the copy or collective of its family
		}
		f.Time += d
		f.Launches += sp.launches
		f.Bytes += sp.work.Bytes
		f.FLOPs += sp.work.FLOPs
		p.fams[sp.fam] = f
	}
	return nil
}

func (p *profiler) close() {
	for _, e := range p.events {
		e.Destroy()
	}
	p.events = nil
}

// Profile returns the GPU time per kernel family (the launch plan's Step.Op:
// "matmul", "attention.flash.fwd", ...; "optim.*" for the optimizer) of the
// runs since the last call, and starts a new tally. It is nil unless the
// session's Options.Profile is set.
func (s *Session) Profile() map[string]time.Duration {
	return takeTally(s, func(p *profiler) map[string]time.Duration { return p.byFam })
}

// Roofline returns, per kernel family, the GPU time, launches, bytes and FLOPs
// of the runs since the last call, and starts a new tally; nil unless the
// session's Options.Profile is set. Profiled runs are not captured as CUDA
// graphs (each launch has its own events), so the times are those of the
// launches one by one; a kernel's own time is the same either way.
func (s *Session) Roofline() map[string]Family {
	return takeTally(s, func(p *profiler) map[string]Family { return p.fams })
}

// takeTally returns a copy of one of the profiler's tallies and empties it, so
// that each call reports the runs since the last; nil without a profiler.
func takeTally[V any](s *Session, tally func(*profiler) map[string]V) map[string]V {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.prof == nil {
		return nil
	}
	m := tally(s.prof)
	out := maps.Clone(m)
	clear(m)
	return out
}
