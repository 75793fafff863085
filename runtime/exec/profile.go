package exec

import (
	"fmt"
	"maps"
	"time"

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

// collect adds the time between marks i and i+1 to families[i]; the stream
// must have synchronised.
func (p *profiler) collect(families []string) error {
	for i, fam := range families {
		d, err := p.events[i+1].Since(p.events[i])
		if err != nil {
			return fmt.Errorf("exec: profile: %w", err)
		}
		p.byFam[fam] += d
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
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.prof == nil {
		return nil
	}
	out := maps.Clone(s.prof.byFam)
	clear(s.prof.byFam)
	return out
}
