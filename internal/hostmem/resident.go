package hostmem

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Resident returns this process's resident set now (VmRSS) and at most so far
// (VmHWM), in bytes, from /proc/self/status: the measured host figures lcc
// train prints beside its planned host peak. Pinned buffers are resident, so
// they are in both.
func Resident() (rss, hwm int64, err error) { return residentFrom("/") }

// residentFrom is Resident on the file tree under root.
func residentFrom(root string) (rss, hwm int64, err error) {
	path := filepath.Join(root, "proc/self/status")
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, fmt.Errorf("hostmem: %w", err)
	}
	found := 0
	for _, line := range strings.Split(string(data), "\n") {
		key, rest, ok := strings.Cut(line, ":")
		if !ok || (key != "VmRSS" && key != "VmHWM") {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		if err != nil || kb < 0 {
			return 0, 0, fmt.Errorf("hostmem: %s: %s %q is not a size in kB", path, key, rest)
		}
		if key == "VmRSS" {
			rss = kb << 10
		} else {
			hwm = kb << 10
		}
		found++
	}
	if found < 2 {
		return 0, 0, fmt.Errorf("hostmem: %s lacks VmRSS or VmHWM", path)
	}
	return rss, hwm, nil
}
