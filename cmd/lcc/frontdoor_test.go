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

// TestFlagValueErrors: a value that does not parse is named with its flag and
// what the flag wants, not with Go's parse function.
func TestFlagValueErrors(t *testing.T) {
	for flag, want := range map[string]string{
		"--lr=abc":                       `lcc: --lr "abc": want a number`,
		"--steps=x":                      `lcc: --steps "x": want an integer`,
		"--seq-len=99999999999999999999": `lcc: --seq-len "99999999999999999999": out of range`,
		"--comm-timeout=soon":            `lcc: --comm-timeout "soon": want a duration such as 90s or 5m`,
		"--resume=maybe":                 `lcc: --resume "maybe": want true or false`,
	} {
		_, stderr, code := lcc(t, "train", filepath.Join(td, "onnx", "gpt_mini.onnx"), flag)
		if code != 1 || stderr != want+"\n" {
			t.Errorf("%s: exit %d: %q, want %q", flag, code, stderr, want)
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

// TestREADMEFrontDoor: the README opens with a sentence saying what lcc is, then
// the two commands; its quickstart exports, tokenizes, trains and exports with
// scripts and flags that exist; its token file is described; and its prose
// comes in short paragraphs, the details living in docs/.
func TestREADMEFrontDoor(t *testing.T) {
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(data)
	lines := strings.Split(readme, "\n")
	if lines[0] != "# lcc" || !strings.HasPrefix(lines[2], "lcc is ") {
		t.Errorf("the README does not open with what lcc is: %q", lines[:3])
	}
	for _, want := range []string{
		"go run ./cmd/lcc compile testdata/onnx/llama_mini.onnx --target=a100x8 --seq-len=1048576 -o out/llama_mini",
		"make test", "scripts/export_hf.py", "scripts/tokenize.py", "nanoGPT", "uint16", "uint32",
		"`batch` and `seq`", "load_state_dict", "(docs/usage.md)",
	} {
		if !strings.Contains(readme, want) {
			t.Errorf("the README lacks %q", want)
		}
	}
	for _, script := range []string{"export_hf.py", "tokenize.py"} {
		if _, err := os.Stat(filepath.Join("../../scripts", script)); err != nil {
			t.Error(err)
		}
	}
	// Every module go.mod requires directly has its reason in the README.
	mod, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	block := regexp.MustCompile(`(?s)require \((.*?)\)`).FindSubmatch(mod)
	for _, line := range strings.Split(string(block[1]), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && !strings.Contains(line, "// indirect") &&
			!strings.Contains(readme, "| `"+f[0]) {
			t.Errorf("the README's dependency table does not give %s's reason", f[0])
		}
	}
	// Prose paragraphs (not code, tables or lists) stay short.
	n := 0
	for i, l := range append(lines, "") {
		prose := l != "" && !strings.HasPrefix(l, "    ") && !strings.HasPrefix(l, "|") &&
			!strings.HasPrefix(l, "```") && !strings.HasPrefix(l, "#")
		if prose {
			n++
			continue
		}
		if n > 10 {
			t.Errorf("README line %d ends a paragraph of %d lines", i, n)
		}
		n = 0
	}
	// Every flag of the quickstart's lcc commands is one the command has.
	cmds := regexp.MustCompile(`(?m)^    \$ lcc (\w+) ((?:.*\\\n)*.*)$`).FindAllStringSubmatch(readme, -1)
	if len(cmds) < 2 {
		t.Fatalf("the quickstart shows %d lcc commands", len(cmds))
	}
	for _, c := range cmds {
		help, _, _ := lcc(t, c[1], "--help")
		for _, f := range regexp.MustCompile(`--[a-z-]+`).FindAllString(c[2], -1) {
			if !strings.Contains(help, "  "+f+" ") && !strings.Contains(help, ", "+f+" ") {
				t.Errorf("the README's lcc %s uses %s, which lcc %s --help does not list", c[1], f, c[1])
			}
		}
	}
}
