package optim

import (
	"fmt"
	"math"
)

// Schedule is linear warmup then cosine decay to MinLR, the schedule of most
// transformer pre-training recipes. It is computed on the host and fed to the
// update function as its "lr" input, so changing it never recompiles anything.
type Schedule struct {
	LR    float64 // peak learning rate
	MinLR float64 // floor reached at step Total
	// Warmup steps ramp linearly from LR/Warmup (step 0) to LR (step Warmup−1).
	Warmup int
	// Total is the step count the cosine spans (the run's --steps).
	Total int
}

// Check reports a schedule that cannot run.
func (s Schedule) Check() error {
	switch {
	case !(s.LR > 0) || math.IsInf(s.LR, 0):
		return fmt.Errorf("learning rate %v: want a positive number", s.LR)
	case s.MinLR < 0 || s.MinLR > s.LR:
		return fmt.Errorf("min learning rate %v: want 0 <= min <= lr (%v)", s.MinLR, s.LR)
	case s.Warmup < 0:
		return fmt.Errorf("warmup %d: want >= 0", s.Warmup)
	case s.Total <= 0:
		return fmt.Errorf("total steps %d: want > 0", s.Total)
	}
	return nil
}

// At returns the learning rate of the update with 0-based index step.
//
// Warmup counts from 1 so that the first update already moves the weights;
// the cosine runs over steps Warmup..Total, reaching MinLR at Total, and stays
// there for steps past Total.
func (s Schedule) At(step int) float64 {
	if step < s.Warmup {
		return s.LR * float64(step+1) / float64(s.Warmup)
	}
	span := s.Total - s.Warmup
	if span <= 0 {
		return s.LR
	}
	p := min(1, float64(step-s.Warmup)/float64(span))
	return s.MinLR + (s.LR-s.MinLR)*0.5*(1+math.Cos(math.Pi*p))
}
