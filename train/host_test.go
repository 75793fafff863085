package train

import (
	"strings"
	"testing"

	"github.com/lcc-dev/lcc/internal/hostmem"
	"github.com/lcc-dev/lcc/report"
)

// TestCheckHost: a GPU run's plan is checked against the measured limits
// before anything is allocated: what it still has to allocate (the host peak
// less what is loaded) against the memory available, naming its source and
// the --host-memory-budget that plans within it, and its pinned bytes against
// RLIMIT_MEMLOCK, which RLIM_INFINITY (Unlimited) never refuses.
func TestCheckHost(t *testing.T) {
	const gib = 1 << 30
	m := report.Memory{HostPeakBytes: 100 * gib, HostModelBytes: 36 * gib, PinnedBytes: 64 * gib, HostBytes: 64 * gib}
	loaded := int64(9 * gib)
	fits := hostmem.Limits{Available: 91 * gib, Source: "MemAvailable in /proc/meminfo", MemLock: hostmem.Unlimited}
	if err := checkHost(m, loaded, fits); err != nil {
		t.Errorf("fits: %v", err)
	}
	if err := checkHost(report.Memory{}, loaded, hostmem.Limits{}); err != nil {
		t.Errorf("a plan without a host side: %v", err)
	}
	short := fits
	short.Available, short.Source = 80*gib, "the cgroup limit in /sys/fs/cgroup/memory.max less its usage"
	err := checkHost(m, loaded, short)
	for _, want := range []string{"91.00 GiB more host memory", "9.00 GiB already loaded", "host peak 100.00 GiB",
		"80.00 GiB available (the cgroup limit in /sys/fs/cgroup/memory.max", "--host-memory-budget=91136MiB"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("short host: want %q in %v", want, err)
		}
	}
	locked := fits
	locked.MemLock = 8 << 20
	err = checkHost(m, loaded, locked)
	for _, want := range []string{"pins 64.00 GiB", "8.00 MiB this process may lock (RLIMIT_MEMLOCK"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("memlock: want %q in %v", want, err)
		}
	}
}
