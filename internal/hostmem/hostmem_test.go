package hostmem

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAvailable: on this machine (Linux) the figure is positive and says where it
// comes from.
func TestAvailable(t *testing.T) {
	b, src, err := Available()
	if err != nil {
		t.Skipf("no host memory figure here: %v", err)
	}
	if b <= 0 || src == "" {
		t.Errorf("Available() = %d, %q", b, src)
	}
	t.Logf("%d bytes (%s)", b, src)
}

// fakeRoot writes files (path relative to the root: contents) under a new root.
func fakeRoot(t *testing.T, files map[string]string) string {
	root := t.TempDir()
	for p, s := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

const meminfo = "MemTotal:       24683548 kB\nMemAvailable:    2097152 kB\n" // 2 GiB available

// TestCgroups: a cgroup limit below MemAvailable wins, less what the cgroup already
// uses; v2's "max" and v1's "no limit" value do not; the process's own cgroup comes
// before the mount's root.
func TestCgroups(t *testing.T) {
	cases := []struct {
		name  string
		files map[string]string
		bytes int64
		src   string
	}{
		{"meminfo only", map[string]string{"proc/meminfo": meminfo}, 2 << 30, "MemAvailable"},
		{"v2 limit", map[string]string{"proc/meminfo": meminfo, "sys/fs/cgroup/memory.max": "1073741824\n",
			"sys/fs/cgroup/memory.current": "73741824\n"}, 1000000000, "/sys/fs/cgroup/memory.max"},
		{"v2 max", map[string]string{"proc/meminfo": meminfo, "sys/fs/cgroup/memory.max": "max\n"},
			2 << 30, "MemAvailable"},
		{"v2 limit above MemAvailable", map[string]string{"proc/meminfo": meminfo,
			"sys/fs/cgroup/memory.max": "8589934592\n"}, 2 << 30, "MemAvailable"},
		{"v1 no limit", map[string]string{"proc/meminfo": meminfo,
			"sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n"}, 2 << 30, "MemAvailable"},
		{"v1 own cgroup", map[string]string{"proc/meminfo": meminfo,
			"proc/self/cgroup": "4:memory:/job\n0::/\n",
			"sys/fs/cgroup/memory/job/memory.limit_in_bytes": "536870912\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes":     "1073741824\n",
			"sys/fs/cgroup/memory/job/memory.usage_in_bytes": "0\n"},
			512 << 20, "/sys/fs/cgroup/memory/job/memory.limit_in_bytes"},
	}
	for _, c := range cases {
		b, src, err := fromRoot(fakeRoot(t, c.files))
		if err != nil || b != c.bytes || !strings.Contains(src, c.src) {
			t.Errorf("%s: %d, %q, %v; want %d from %s", c.name, b, src, err, c.bytes, c.src)
		}
	}
	if _, _, err := fromRoot(fakeRoot(t, map[string]string{"proc/meminfo": "MemTotal: 1 kB\n"})); err == nil {
		t.Error("a meminfo without MemAvailable gave no error")
	}
}

// TestMemLock: the limit reads here, and RLIM_INFINITY (and any figure past
// int64) is Unlimited, not a negative size.
func TestMemLock(t *testing.T) {
	b, err := MemLock()
	if err != nil {
		t.Skipf("no memlock limit here: %v", err)
	}
	if b < 0 {
		t.Errorf("MemLock() = %d", b)
	}
	t.Logf("RLIMIT_MEMLOCK %d bytes", b)
	for raw, want := range map[uint64]int64{rlimInfinity: Unlimited, 1 << 63: Unlimited, 65536: 65536, 0: 0} {
		if got := memLockBytes(raw); got != want {
			t.Errorf("memLockBytes(%d) = %d, want %d", raw, got, want)
		}
	}
	if l, ok := Read(); ok && (l.Available <= 0 || l.MemLock != b) {
		t.Errorf("Read() = %+v, MemLock %d", l, b)
	}
}

// TestResident: this process's figures read, the peak at least the current
// set; a fake status file parses, and one without the lines is an error.
func TestResident(t *testing.T) {
	rss, hwm, err := Resident()
	if err != nil {
		t.Skipf("no /proc/self/status here: %v", err)
	}
	if rss <= 0 || hwm < rss {
		t.Errorf("VmRSS %d, VmHWM %d", rss, hwm)
	}
	root := fakeRoot(t, map[string]string{"proc/self/status": "Name:\tlcc\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\n"})
	if rss, hwm, err := residentFrom(root); err != nil || rss != 1<<20 || hwm != 2<<20 {
		t.Errorf("fake status: %d, %d, %v", rss, hwm, err)
	}
	root = fakeRoot(t, map[string]string{"proc/self/status": "Name:\tlcc\n"})
	if _, _, err := residentFrom(root); err == nil || !strings.Contains(err.Error(), "VmRSS") {
		t.Errorf("no Vm lines: %v", err)
	}
}
