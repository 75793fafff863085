package perf

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/lcc-dev/lcc/runtime/cuda"
)

// Timing is the result of Time: the median and every measured run.
type Timing struct {
	Median time.Duration
	Runs   []time.Duration
}

// Ms is the median in milliseconds.
func (t Timing) Ms() float64 { return float64(t.Median) / float64(time.Millisecond) }

// Time runs fn warm times, then iters times between two events recorded on
// stream, and returns the median GPU time. fn queues work on stream (it may also
// synchronise; the events still bracket it). iters must be at least 1.
func Time(dev *cuda.Device, stream *cuda.Stream, warm, iters int, fn func() error) (Timing, error) {
	if iters < 1 {
		return Timing{}, fmt.Errorf("perf: %d timed iterations: want at least 1", iters)
	}
	for i := 0; i < warm; i++ {
		if err := fn(); err != nil {
			return Timing{}, err
		}
	}
	if err := stream.Synchronize(); err != nil {
		return Timing{}, err
	}
	start, err := dev.NewEvent()
	if err != nil {
		return Timing{}, err
	}
	stop, err := dev.NewEvent()
	if err != nil {
		start.Destroy()
		return Timing{}, err
	}
	defer func() { start.Destroy(); stop.Destroy() }()
	var t Timing
	for i := 0; i < iters; i++ {
		if err := start.Record(stream); err != nil {
			return Timing{}, err
		}
		if err := fn(); err != nil {
			return Timing{}, err
		}
		if err := stop.Record(stream); err != nil {
			return Timing{}, err
		}
		if err := stop.Synchronize(); err != nil {
			return Timing{}, err
		}
		d, err := stop.Since(start)
		if err != nil {
			return Timing{}, err
		}
		t.Runs = append(t.Runs, d)
	}
	s := slices.Clone(t.Runs)
	slices.Sort(s)
	t.Median = s[len(s)/2]
	if t.Median <= 0 {
		return t, errors.New("perf: a timed run took no measurable GPU time")
	}
	return t, nil
}
