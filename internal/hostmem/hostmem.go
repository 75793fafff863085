// Package hostmem reads how much host memory this process may use: the kernel's
// MemAvailable (/proc/meminfo), or the memory limit of the process's cgroup where
// one is set and smaller (cgroup v2 memory.max, v1 memory.limit_in_bytes), since a
// container's limit kills the process long before the machine runs short.
//
// Callers compare a planned host peak with it before allocating (the CPU
// interpreter's runs, pinned host blocks for offloaded activations), so that a run
// too large for the host is refused with both figures instead of dying in the
// middle with "fatal error: out of memory".
package hostmem

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Available returns the host memory this process may still allocate, in bytes, and
// where the figure comes from ("MemAvailable in /proc/meminfo", or the cgroup file
// that limits it). It is an error where neither can be read (not Linux).
func Available() (bytes int64, source string, err error) { return fromRoot("/") }

// fromRoot is Available on the file tree under root, so tests can give it a fake one.
func fromRoot(root string) (int64, string, error) {
	meminfo := filepath.Join(root, "proc/meminfo")
	avail, err := memAvailable(meminfo)
	if err != nil {
		return 0, "", err
	}
	bytes, source := avail, "MemAvailable in /proc/meminfo"
	for _, f := range cgroupLimitFiles(root) {
		limit, usage, ok := cgroupLimit(f)
		if !ok {
			continue
		}
		// What the cgroup allows beyond what it already holds; page cache counts in
		// the usage but is reclaimable, so this errs on the safe side.
		if left := limit - usage; left < bytes {
			rel, _ := filepath.Rel(root, f.limit)
			bytes, source = max(left, 0), "the cgroup limit in /"+rel+" less its usage"
		}
		break // the most specific limit found is the one that applies
	}
	return bytes, source, nil
}

// memAvailable reads MemAvailable from a meminfo file.
func memAvailable(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("hostmem: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, found := strings.CutPrefix(sc.Text(), "MemAvailable:"); found {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil || kb < 0 {
				return 0, fmt.Errorf("hostmem: %s: MemAvailable %q is not a size in kB", path, rest)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("hostmem: %s has no MemAvailable line", path)
}

// limitFile is a cgroup's limit file and the file of its current usage.
type limitFile struct{ limit, usage string }

// cgroupLimitFiles lists the cgroup files that may limit this process, most
// specific first: v2's unified hierarchy, then v1's memory controller, each at the
// process's own cgroup (from /proc/self/cgroup) and at the mount's root, which is
// the process's cgroup inside a container with its own cgroup namespace.
func cgroupLimitFiles(root string) []limitFile {
	v2 := limitFile{"memory.max", "memory.current"}
	v1 := limitFile{"memory.limit_in_bytes", "memory.usage_in_bytes"}
	var files []limitFile
	add := func(dir string, f limitFile) {
		files = append(files, limitFile{filepath.Join(dir, f.limit), filepath.Join(dir, f.usage)})
	}
	own := ownCgroups(filepath.Join(root, "proc/self/cgroup"))
	for _, m := range []struct {
		dir  string
		file limitFile
		ctrl string
	}{{"sys/fs/cgroup", v2, ""}, {"sys/fs/cgroup/memory", v1, "memory"}} {
		base := filepath.Join(root, m.dir)
		if p, ok := own[m.ctrl]; ok && p != "/" {
			add(filepath.Join(base, p), m.file)
		}
		add(base, m.file)
	}
	return files
}

// ownCgroups maps each controller of /proc/self/cgroup ("" for v2) to the
// process's cgroup path.
func ownCgroups(path string) map[string]string {
	out := map[string]string{}
	data, err := os.ReadFile(path)
	if err != nil {
		return out
	}
	for _, line := range strings.Split(string(data), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			out[c] = parts[2]
		}
	}
	return out
}

// cgroupLimit reads a limit and its usage; ok is false where the files are absent
// or the limit is "max" (v2) or the v1 "no limit" value (close to 2^63).
func cgroupLimit(f limitFile) (limit, usage int64, ok bool) {
	limit, err := readInt(f.limit)
	if err != nil || limit >= 1<<62 {
		return 0, 0, false
	}
	usage, err = readInt(f.usage)
	if err != nil {
		usage = 0
	}
	return limit, usage, true
}

var errNoLimit = errors.New("no limit")

func readInt(path string) (int64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(data))
	if s == "max" {
		return 0, errNoLimit
	}
	return strconv.ParseInt(s, 10, 64)
}
