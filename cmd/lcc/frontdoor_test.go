package main

import (
	"os"
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

// TestErrorsSpeakToUsers: errors about a user's files name the file and say
// what is wrong in the user's terms: no Go names of system calls (statat) or
// types, no bare "unexpected EOF".
func TestErrorsSpeakToUsers(t *testing.T) {
	dir := t.TempDir()
	// A model whose external data file is missing.
	ext := filepath.Join(dir, "ext", "llama_mini_extdata.onnx")
	copyFile(t, filepath.Join(td, "onnx", "llama_mini_extdata.onnx"), ext)
	// A compiled step whose report.json is cut short.
	step := filepath.Join(dir, "step")
	if _, stderr, code := lcc(t, "compile", filepath.Join(td, "onnx", "gpt_mini.onnx"), "--seq-len=8", "-o",
		step); code != 0 {
		t.Fatal(stderr)
	}
	writeFile(t, filepath.Join(step, "report.json"), `{"mode": "training", "pipeline": [`)
	badTargets := writeFile(t, filepath.Join(dir, "targets.json"), "[{\"base\": \"h200x8\", \"name\": \"a\"},\n{\"name\" 1}]")
	badMetrics := writeFile(t, filepath.Join(dir, "m.jsonl"), "{\"step\": 1, \"measured_peak_bytes\": 5}\n{\"step\"")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"compile", ext, "--seq-len=8"}, `external data "llama_mini_extdata.onnx.data" (` +
			ext + `.data): no such file or directory`},
		{[]string{"train", filepath.Join(step, "graph.lcc"), "--data=synthetic:copy", "--steps=1"},
			filepath.Join(step, "report.json") + ": malformed JSON: it ends before its last value does"},
		{[]string{"compile", ext, "--target-file=" + badTargets, "--target=a"},
			badTargets + ": malformed JSON at line 2, column 9: invalid character '1' after object key"},
		{[]string{"compile", filepath.Join(td, "onnx", "gpt_mini.onnx"), "--seq-len=8", "-o", filepath.Join(dir, "o"),
			"--emit=memory", "--measured=" + badMetrics}, "--measured " + badMetrics + ":2: malformed JSON"},
	} {
		_, stderr, code := lcc(t, c.args...)
		if code != 1 || !strings.Contains(stderr, c.want) {
			t.Errorf("lcc %v: exit %d:\n%s\nwant %q", c.args, code, stderr, c.want)
		}
		for _, ban := range []string{"statat", "openat", "Go struct", "Go value", "of type ", "main.",
			": unexpected EOF"} {
			if strings.Contains(stderr, ban) {
				t.Errorf("lcc %v: %q names %q", c.args, stderr, ban)
			}
		}
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, to, string(data))
}

func writeFile(t *testing.T, path, data string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
