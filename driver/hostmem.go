package driver

import (
	"fmt"
	"math"

	"github.com/lcc-dev/lcc/internal/hostmem"
	"github.com/lcc-dev/lcc/interp"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/report"
)

// HostBudget is the host memory a run on the CPU interpreter may hold, and where
// that figure comes from. The zero value checks nothing (the host's memory is
// unknown there).
type HostBudget struct {
	Bytes  int64
	Source string // "--host-memory-budget", "MemAvailable in /proc/meminfo", ...
}

// NewHostBudget is the budget of a --host-memory-budget of flag bytes, or, when
// flag is 0 (not given), the memory the host has available (package hostmem).
func NewHostBudget(flag int64) HostBudget {
	if flag > 0 {
		return HostBudget{Bytes: flag, Source: "--host-memory-budget"}
	}
	b, src, err := hostmem.Available()
	if err != nil {
		return HostBudget{}
	}
	return HostBudget{Bytes: b, Source: src}
}

// Share is the budget of one of n runs that hold their memory at once (the
// goroutine ranks of one process); n <= 1 is b itself.
func (b HostBudget) Share(n int) HostBudget {
	if n <= 1 || b.Bytes <= 0 {
		return b
	}
	return HostBudget{Bytes: b.Bytes / int64(n), Source: fmt.Sprintf("%s, shared by %d ranks", b.Source, n)}
}

// Fit refuses f when the CPU interpreter's estimated peak for a run of it
// (interp.HostPeak), plus held bytes its caller keeps beside it (a trainer's optimizer
// moments), passes the budget: the error gives both figures and the node where the
// peak falls, before anything is allocated.
func (b HostBudget) Fit(f *ir.Func, held int64) error {
	if b.Bytes <= 0 {
		return nil
	}
	peak, at := interp.HostPeak(f)
	if peak > b.Bytes-held {
		where := "its parameters"
		if at != nil {
			where = fmt.Sprintf("%s, making %v", at.Where(), at.Results[0].Type)
		}
		if held > 0 {
			where += fmt.Sprintf(", with %s held beside it", report.Bytes(held))
		}
		total := peak + min(held, math.MaxInt64-peak)
		return fmt.Errorf("a CPU run of @%s needs about %d bytes (%s) of host memory at its peak (%s), "+
			"more than the %d bytes (%s) available (%s); the CPU interpreter holds every element in 8 "+
			"bytes: bind smaller dims (--seq-len, --batch) or give --host-memory-budget SIZE",
			f.Name, total, report.Bytes(total), where, b.Bytes, report.Bytes(b.Bytes), b.Source)
	}
	return nil
}
