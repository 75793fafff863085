package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strings"
	"testing"

	"github.com/lcc-dev/lcc/driver"
	"github.com/lcc-dev/lcc/safetensors"
)

// nodeCasesMinPass is the least number of ONNX node cases that must pass. Raise it
// when support grows; it must never drop.
const nodeCasesMinPass = 1024

// nodeCase is one entry of the archive's manifest.json (scripts/onnx_node_cases.py).
type nodeCase struct {
	Name    string         `json:"name"`
	Ops     []string       `json:"ops"`
	Opset   map[string]int `json:"opset"`
	Skipped string         `json:"skipped"`
	Files   []string       `json:"files"`
}

// nodeOutcome is what `lcc check` did with one case.
type nodeOutcome struct {
	name, kind, msg string // kind: pass, refused, wrong, panic
}

// readNodeCases unpacks testdata/onnx_node/onnx_node_cases.tar.gz into memory.
func readNodeCases(t *testing.T) ([]nodeCase, map[string][]byte) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(td, "onnx_node", "onnx_node_cases.tar.gz"))
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = b
	}
	var m struct {
		Cases []nodeCase `json:"cases"`
	}
	if err := json.Unmarshal(files["manifest.json"], &m); err != nil {
		t.Fatalf("manifest.json: %v", err)
	}
	return m.Cases, files
}

// runCheck runs `lcc check MODEL --ref REF` in process, turning a panic into an
// outcome of kind "panic".
func runCheck(model, ref string) (out nodeOutcome) {
	defer func() {
		if r := recover(); r != nil {
			out = nodeOutcome{kind: "panic", msg: fmt.Sprintf("%v\n%s", r, debug.Stack())}
		}
	}()
	cmd := checkCmd()
	var stdout, stderr bytes.Buffer
	cmd.SetOut(&stdout)
	cmd.SetErr(&stderr)
	cmd.SetArgs([]string{model, "--ref", ref})
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	err := cmd.Execute()
	switch {
	case err == nil:
		return nodeOutcome{kind: "pass"}
	case errors.Is(err, driver.ErrTolerance) || errors.Is(err, driver.ErrShape):
		return nodeOutcome{kind: "wrong", msg: err.Error() + "\n" + stdout.String()}
	}
	return nodeOutcome{kind: "refused", msg: err.Error()}
}

// TestONNXNodeCases runs every ONNX operator test case (generated from onnx 1.23 by
// scripts/onnx_node_cases.py) through `lcc check` on the CPU: each passes or is
// refused with an error naming the file; none panics or gives a wrong number, and
// the number that pass never drops below nodeCasesMinPass.
func TestONNXNodeCases(t *testing.T) {
	cases, files := readNodeCases(t)
	dir := t.TempDir()
	var outcomes []nodeOutcome
	skipped := 0
	for _, c := range cases {
		if c.Skipped != "" {
			skipped++
			continue
		}
		cdir := filepath.Join(dir, c.Name)
		if err := os.MkdirAll(cdir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range c.Files {
			if err := os.WriteFile(filepath.Join(cdir, f), files["cases/"+c.Name+"/"+f], 0o644); err != nil {
				t.Fatal(err)
			}
		}
		for _, f := range c.Files {
			if !strings.HasPrefix(f, "ref") {
				continue
			}
			o := runCheck(filepath.Join(cdir, "model.onnx"), filepath.Join(cdir, f))
			o.name = c.Name
			outcomes = append(outcomes, o)
		}
	}
	count := map[string]int{}
	reasons := map[string]int{}
	for _, o := range outcomes {
		count[o.kind]++
		switch o.kind {
		case "panic", "wrong":
			t.Errorf("%s: %s: %s", o.name, o.kind, o.msg)
		case "refused":
			// A clear refusal names the file it is about.
			if !strings.Contains(o.msg, "model.onnx") && !strings.Contains(o.msg, "ref.safetensors") {
				t.Errorf("%s: refused without naming the model or reference: %q", o.name, o.msg)
			}
			reasons[refusalKey(o.msg)]++
		}
	}
	if os.Getenv("LCC_NODE_CASES_VERBOSE") != "" {
		for _, o := range outcomes {
			fmt.Printf("%-8s %-60s %s\n", o.kind, o.name, firstLine(o.msg))
		}
		type kv struct {
			k string
			n int
		}
		var rs []kv
		for k, n := range reasons {
			rs = append(rs, kv{k, n})
		}
		sort.Slice(rs, func(i, j int) bool { return rs[i].n > rs[j].n || rs[i].n == rs[j].n && rs[i].k < rs[j].k })
		for _, r := range rs {
			fmt.Printf("%5d  %s\n", r.n, r.k)
		}
	}
	t.Logf("ONNX node cases: %d in the archive (%d skipped by the generator), %d checked: %d pass, %d refused, %d wrong, %d panic",
		len(cases), skipped, len(outcomes), count["pass"], count["refused"], count["wrong"], count["panic"])
	if count["pass"] < nodeCasesMinPass {
		t.Errorf("%d cases pass, fewer than the %d that passed before", count["pass"], nodeCasesMinPass)
	}
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// refusalKey groups refusal messages for the verbose summary: the message with the
// case's own path removed.
func refusalKey(msg string) string {
	msg = firstLine(msg)
	if i := strings.LastIndex(msg, "model.onnx: "); i >= 0 {
		msg = msg[i+len("model.onnx: "):]
	}
	if len(msg) > 100 {
		msg = msg[:100]
	}
	return msg
}

// TestRunBindsShapeInputs: `lcc run` binds integer inputs that decide shapes (Slice's
// starts, ends, axes and steps in ONNX's test_slice) to the values it is given,
// as `lcc check` does, and writes the expected output.
func TestRunBindsShapeInputs(t *testing.T) {
	_, files := readNodeCases(t)
	dir := t.TempDir()
	model, ref := filepath.Join(dir, "model.onnx"), filepath.Join(dir, "ref.safetensors")
	for name, path := range map[string]string{"model.onnx": model, "ref.safetensors": ref} {
		if err := os.WriteFile(path, files["cases/test_slice/"+name], 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(dir, "out.safetensors")
	cmd := runCmd()
	var stdout, stderr bytes.Buffer
	cmd.SetOut(&stdout)
	cmd.SetErr(&stderr)
	cmd.SetArgs([]string{model, "--inputs", ref, "--outputs", out})
	if err := cmd.Execute(); err != nil {
		t.Fatalf("lcc run: %v\n%s", err, stderr.String())
	}
	got, err := safetensors.Read(out)
	if err != nil {
		t.Fatal(err)
	}
	want, err := safetensors.Read(ref)
	if err != nil {
		t.Fatal(err)
	}
	c, err := driver.Compare("y", got.Tensors["y"], want.Tensors["y"])
	if err != nil || c.RelErr != 0 {
		t.Errorf("y: %+v, %v", c, err)
	}
}
