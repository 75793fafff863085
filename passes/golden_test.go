package passes

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/tools/txtar"

	cudagen "github.com/lcc-dev/lcc/codegen/cuda"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

var update = flag.Bool("update", false, "rewrite the want.lcc and error sections of testdata files")

// TestGolden runs the golden files under testdata/*/: each is a txtar archive with
// a comment saying what it tests, then
//
//	-- in.lcc --     the function (text IR)
//	-- pipeline --   the passes to run, one per line: `name key=value ...`
//	                 (ParsePipeline); the IR is verified after each
//	-- want.lcc --   the exact IR after the pipeline, or
//	-- want.cu --    when the pipeline ends with `codegen arch=A storage=S`: the
//	                 kernels codegen/cuda generates for the IR, after the shared
//	                 prelude, with their launch shapes, and the launch steps, or
//	-- error --      a part of the error the pipeline must fail with
//
// and optionally
//
//	-- want --       properties of the attention ops after the pipeline (checkProperties)
//	-- check --      how the outputs are compared before and after: `ints N` draws
//	                 integer inputs below N (default 1000), `skip REASON` compares
//	                 nothing (a pass that changes what the function computes)
//
// Unless skipped, the function computes the same outputs before and after the
// pipeline on the CPU interpreter in float64 (relative error ≤ 1e-6).
// `go test -update` rewrites want.lcc and error sections from what the passes do.
func TestGolden(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join("testdata", "*", "*.txtar"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no test files (%v)", err)
	}
	for _, path := range paths {
		name := strings.TrimSuffix(strings.TrimPrefix(path, "testdata"+string(filepath.Separator)), ".txtar")
		t.Run(name, func(t *testing.T) { runGolden(t, path) })
	}
}

func readGolden(t *testing.T, path string) (*txtar.Archive, map[string]string) {
	t.Helper()
	ar, err := txtar.ParseFile(path)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{}
	for _, f := range ar.Files {
		switch f.Name {
		case "in.lcc", "pipeline", "want.lcc", "want.cu", "error", "want", "check":
		default:
			t.Fatalf("unknown section %q", f.Name)
		}
		files[f.Name] = string(f.Data)
	}
	if _, ok := files["in.lcc"]; !ok {
		t.Fatal("no in.lcc section")
	}
	if _, ok := files["pipeline"]; !ok {
		t.Fatal("no pipeline section")
	}
	return ar, files
}

func runGolden(t *testing.T, path string) {
	ar, files := readGolden(t, path)
	f, err := ir.Parse(files["in.lcc"])
	if err != nil {
		t.Fatalf("in.lcc: %v", err)
	}
	if got := ir.Print(f); got != files["in.lcc"] {
		t.Errorf("in.lcc does not print back as itself:\n%s", got)
	}
	pipeline, codegen := splitCodegen(t, files["pipeline"])
	ps, err := ParsePipeline(pipeline)
	if err != nil {
		t.Fatal(err)
	}
	before := f.Clone()
	_, runErr := Run(f, ps, Options{VerifyEach: true})
	var cu string
	if runErr == nil && codegen != nil {
		cu, runErr = generate(f, *codegen)
	}
	if wantErr, ok := files["error"]; ok {
		switch {
		case runErr == nil:
			t.Fatalf("pipeline succeeded, want error %q; IR after:\n%s", wantErr, ir.Print(f))
		case *update:
			writeSection(t, path, ar, "error", runErr.Error()+"\n")
		case !strings.Contains(runErr.Error(), strings.TrimSpace(wantErr)):
			t.Errorf("error %q\nwant it to contain %q", runErr, strings.TrimSpace(wantErr))
		}
		return
	}
	if runErr != nil {
		t.Fatal(runErr)
	}
	if want, ok := files["want"]; ok {
		res, err := FindAttention(f.Clone(), MatchConfig{})
		if err != nil {
			t.Fatal(err)
		}
		checkProperties(t, f, res, want)
	}
	check := strings.Fields(files["check"])
	switch {
	case len(check) == 0:
		checkSame(t, before, f, formInputs(f, 1000), 1e-6)
	case check[0] == "ints" && len(check) == 2:
		n, err := strconv.ParseInt(check[1], 10, 64)
		if err != nil {
			t.Fatalf("check: %v", err)
		}
		checkSame(t, before, f, formInputs(f, n), 1e-6)
	case check[0] == "skip" && len(check) > 1:
	default:
		t.Fatalf("bad check section %q", files["check"])
	}
	if codegen != nil {
		want, ok := files["want.cu"]
		switch {
		case *update:
			writeSection(t, path, ar, "want.cu", cu)
		case !ok:
			t.Errorf("no want.cu section; kernels:\n%s", cu)
		case cu != want:
			t.Errorf("kernels:\n%s\nwant:\n%s", cu, want)
		}
		return
	}
	want, ok := files["want.lcc"]
	got := ir.Print(f)
	switch {
	case *update:
		writeSection(t, path, ar, "want.lcc", got)
	case !ok:
		t.Errorf("no want.lcc or error section; IR after:\n%s", got)
	case !printsBack(want):
		t.Errorf("want.lcc does not parse and print back as itself")
	case got != want:
		t.Errorf("IR after the pipeline:\n%s\nwant:\n%s", got, want)
	}
}

// printsBack reports whether s is in the text form's canonical spelling:
// Print(Parse(s)) == s.
func printsBack(s string) bool {
	f, err := ir.Parse(s)
	return err == nil && ir.Print(f) == s
}

// splitCodegen removes a final `codegen` line from a pipeline and returns its
// options (the registered codegen pass only names the step; the test runs it).
func splitCodegen(t *testing.T, pipeline string) (string, *cudagen.Options) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(pipeline), "\n")
	fields := strings.Fields(lines[len(lines)-1])
	if len(fields) == 0 || fields[0] != "codegen" {
		return pipeline, nil
	}
	o := cudagen.Options{Arch: "sm_90", Storage: tensor.F32}
	for _, w := range fields[1:] {
		k, v, _ := strings.Cut(w, "=")
		switch k {
		case "arch":
			o.Arch = v
		case "storage":
			dt, err := tensor.ParseDType(v)
			if err != nil {
				t.Fatalf("codegen: %v", err)
			}
			o.Storage = dt
		default:
			t.Fatalf("codegen: unknown option %q (arch, storage)", w)
		}
	}
	return strings.Join(lines[:len(lines)-1], "\n"), &o
}

// generate renders what codegen/cuda makes of f: each kernel after the shared
// prelude, then the launch steps.
func generate(f *ir.Func, o cudagen.Options) (string, error) {
	p, err := cudagen.Build(f, o)
	if err != nil {
		return "", err
	}
	var sb strings.Builder
	for _, k := range p.Kernels {
		fmt.Fprintf(&sb, "// kernel %s (%s) grid=%v block=%v shared=%d\n%s\n", k.Name, k.Op,
			k.Grid, k.Block, k.Shared, strings.TrimSpace(k.Body()))
	}
	sb.WriteString("// launches\n")
	for _, s := range p.Plan.Steps {
		target := s.Kernel
		if s.Gemm != nil {
			g := s.Gemm
			target = fmt.Sprintf("gemm m=%d n=%d k=%d batch=%d trans_a=%t trans_b=%t", g.M, g.N, g.K,
				g.Batch, g.TransA, g.TransB)
		}
		if s.Kind == "wait" {
			target = "wait for nccl " + s.Coll.Op
		} else if c := s.Coll; c != nil {
			target = fmt.Sprintf("nccl %s count=%d dtype=%s", c.Op, c.Count, c.DType)
			if c.Reduce != "" {
				target += " reduce=" + c.Reduce
			}
			if c.Shift != 0 {
				target += fmt.Sprintf(" shift=%d", c.Shift)
			}
		}
		fmt.Fprintf(&sb, "//   node %d %s: %s args=%v\n", s.Node, s.Op, target, s.Args)
	}
	return sb.String(), nil
}

// TestGoldenCoversEveryPass requires at least two golden files naming each
// registered pass in their pipeline.
func TestGoldenCoversEveryPass(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join("testdata", "*", "*.txtar"))
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, path := range paths {
		_, files := readGolden(t, path)
		seen := map[string]bool{}
		for _, line := range strings.Split(files["pipeline"], "\n") {
			if fs := strings.Fields(line); len(fs) > 0 && !seen[fs[0]] {
				seen[fs[0]] = true
				count[fs[0]]++
			}
		}
	}
	for _, p := range Registry {
		if count[p.Name] < 2 {
			t.Errorf("pass %s: %d golden files under testdata/*/, want at least 2", p.Name, count[p.Name])
		}
	}
}

// formInputs draws random inputs, integers below bound; integer inputs named like
// a mask get 0/1 with the first key always visible, so no query row is fully
// masked.
func formInputs(f *ir.Func, bound int64) map[string]*tensor.Tensor {
	in := randomInputs(f, bound, 3)
	for name, x := range in {
		if !x.DType.IsFloat() && strings.Contains(name, "mask") {
			last := int(x.Shape[len(x.Shape)-1])
			for i := range x.I {
				if i%last == 0 {
					x.I[i] = 1
				} else {
					x.I[i] %= 2
				}
			}
		}
	}
	return in
}

func checkProperties(t *testing.T, f *ir.Func, res *AttentionMatches, want string) {
	t.Helper()
	for _, line := range strings.Split(strings.TrimSpace(want), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 2 {
			t.Fatalf("bad property %q", line)
		}
		switch fields[0] {
		case "found":
			if n, _ := strconv.Atoi(fields[1]); n != len(res.Found) {
				t.Errorf("found %d attention ops, want %d: %+v", len(res.Found), n, res.Found)
			}
		case "unmatched":
			if n, _ := strconv.Atoi(fields[1]); n != len(res.Unmatched) {
				t.Errorf("%d unmatched, want %d: %+v", len(res.Unmatched), n, res.Unmatched)
			}
		case "layer":
			var got []string
			for _, a := range res.Found {
				l := fmt.Sprintf("layer %s causal=%t mask=%s scale=%.8g heads=%d/%d",
					a.Node, a.Causal, a.Mask, a.Scale, a.QHeads, a.KVHeads)
				if a.Window > 0 {
					l += fmt.Sprintf(" window=%d", a.Window)
				}
				got = append(got, l)
			}
			if !strings.Contains(strings.Join(got, "\n"), line) {
				t.Errorf("no %q among\n%s", line, strings.Join(got, "\n"))
			}
		case "reason":
			ok := false
			for _, u := range res.Unmatched {
				ok = ok || u.Softmax == fields[1] && strings.Contains(u.Reason, strings.Join(fields[2:], " "))
			}
			if !ok {
				t.Errorf("no unmatched %q with reason %q: %+v", fields[1], strings.Join(fields[2:], " "),
					res.Unmatched)
			}
		case "ops":
			for _, kv := range fields[1:] {
				name, count, _ := strings.Cut(kv, "=")
				op, ok := ir.LookupOp(name)
				if !ok {
					t.Fatalf("unknown op %q", name)
				}
				if n, _ := strconv.Atoi(count); countOps(f, op) != n {
					t.Errorf("%d %s ops, want %d:\n%s", countOps(f, op), name, n, ir.Print(f))
				}
			}
		default:
			t.Fatalf("unknown property %q", line)
		}
	}
}

// writeSection replaces (or appends) a section of a txtar file.
func writeSection(t *testing.T, path string, ar *txtar.Archive, name, data string) {
	t.Helper()
	found := false
	for i := range ar.Files {
		if ar.Files[i].Name == name {
			ar.Files[i].Data = []byte(data)
			found = true
		}
	}
	if !found {
		ar.Files = append(ar.Files, txtar.File{Name: name, Data: []byte(data)})
	}
	if err := os.WriteFile(path, txtar.Format(ar), 0o644); err != nil {
		t.Fatal(err)
	}
}
