package main

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/lcc-dev/lcc/runtime/cuda"
)

// TestWrongArgCountPrintsUsage: every subcommand given a wrong number of
// arguments says so and prints its usage line.
func TestWrongArgCountPrintsUsage(t *testing.T) {
	for _, c := range []struct {
		cmd  string
		args []string
	}{
		{"compile", nil}, {"run", nil}, {"check", nil}, {"train", nil}, {"export", nil},
		{"targets", []string{"x"}}, {"passes", []string{"x"}}, {"version", []string{"x"}},
		{"compile", []string{"a", "b"}}, {"train", []string{"a", "b"}},
	} {
		_, stderr, code := lcc(t, append([]string{c.cmd}, c.args...)...)
		if code != 1 || !strings.Contains(stderr, "\nusage: lcc "+c.cmd) {
			t.Errorf("lcc %s %v: exit %d, no usage line:\n%s", c.cmd, c.args, code, stderr)
		}
	}
}

// TestVersion: lcc version names the version, the commit, Go, and the CUDA
// driver and NVRTC it finds (or says none was found).
func TestVersion(t *testing.T) {
	out, stderr, code := lcc(t, "version")
	want := regexp.MustCompile(`^lcc \S+\ncommit +\S.*\ngo +go1\.\S+ \S+/\S+\ncuda driver +(CUDA \d+\.\d+ \(.+\)|none .+)\n` +
		`nvrtc +(\d+\.\d+ \(.+\)|none found)\n$`)
	if code != 0 || !want.MatchString(out) {
		t.Errorf("exit %d:\n%s%s", code, out, stderr)
	}
}

// TestNoDriver: --device=cuda where no libcuda loads says so in one line and
// names the way out, not the loader's paths.
func TestNoDriver(t *testing.T) {
	if _, _, err := cuda.DriverLibrary(); !cuda.NoDriver(err) {
		t.Skip("a CUDA driver library is present")
	}
	_, stderr, code := lcc(t, "train", filepath.Join(td, "onnx", "gpt_mini.onnx"), "--data=synthetic:copy",
		"--seq-len=16", "--steps=1", "--device=cuda")
	if code != 1 || stderr != "lcc: no NVIDIA driver (libcuda.so.1 not found); use --device=cpu\n" {
		t.Errorf("exit %d: %q", code, stderr)
	}
}
