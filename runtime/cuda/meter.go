package cuda

import (
	"sync"
	"sync/atomic"
	"time"
)

// PeakMeter measures a run's peak device memory as lcc defines it: the free
// memory (cuMemGetInfo) when the meter starts, before the run allocates
// anything, minus the least free memory seen since. It samples from a goroutine
// every interval and whenever Poll is called (a training loop polls after every
// step). Memory other processes take meanwhile counts too: the figure is the
// device's, not the process's.
type PeakMeter struct {
	dev     *Device
	base    uint64
	least   atomic.Uint64
	stop    chan struct{}
	done    sync.WaitGroup
	stopped sync.Once
}

// StartPeakMeter reads the free memory now and starts sampling every interval
// (10 ms if interval ≤ 0).
func (d *Device) StartPeakMeter(interval time.Duration) (*PeakMeter, error) {
	free, err := d.FreeMem()
	if err != nil {
		return nil, err
	}
	if interval <= 0 {
		interval = 10 * time.Millisecond
	}
	m := &PeakMeter{dev: d, base: free, stop: make(chan struct{})}
	m.least.Store(free)
	m.done.Add(1)
	go func() {
		defer m.done.Done()
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-m.stop:
				return
			case <-tick.C:
				m.Poll()
			}
		}
	}()
	return m, nil
}

// Poll samples the free memory now.
func (m *PeakMeter) Poll() {
	free, err := m.dev.FreeMem()
	if err != nil {
		return // a device that fails reports it through the run itself
	}
	for {
		old := m.least.Load()
		if free >= old || m.least.CompareAndSwap(old, free) {
			return
		}
	}
}

// Peak returns the measured peak in bytes so far: free memory at the start
// minus the least seen.
func (m *PeakMeter) Peak() int64 { return int64(m.base - m.least.Load()) }

// Stop ends the sampling goroutine; Peak still answers. Safe to call twice.
func (m *PeakMeter) Stop() {
	m.stopped.Do(func() { close(m.stop) })
	m.done.Wait()
}
