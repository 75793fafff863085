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

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

var update = flag.Bool("update", false, "rewrite the want.lcc sections of testdata files")

// TestAttentionForms runs match-attention on each exporter form under
// testdata/attention. Each file has a comment, `-- in.lcc --` and `-- want --`
// with properties, one per line:
//
//	found N                  attention ops after the pass
//	unmatched N              attention-like softmaxes left
//	layer NAME causal=B mask=M scale=S heads=Q/KV   one found layer
//	reason SOFTMAX TEXT      an unmatched softmax and part of its reason
//	ops OP=N ...             op counts after the pass (and dead-code removal)
//
// and optionally `-- want.lcc --`, the exact IR after the pass (go test -update
// rewrites it). Every file also checks that the function computes the same
// outputs before and after on the CPU interpreter in float64.
func TestAttentionForms(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join("testdata", "attention", "*.txtar"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no test files (%v)", err)
	}
	for _, path := range paths {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".txtar"), func(t *testing.T) {
			ar, err := txtar.ParseFile(path)
			if err != nil {
				t.Fatal(err)
			}
			files := map[string]string{}
			for _, f := range ar.Files {
				files[f.Name] = string(f.Data)
			}
			f, err := ir.Parse(files["in.lcc"])
			if err != nil {
				t.Fatalf("in.lcc: %v", err)
			}
			before := f.Clone()
			var res AttentionMatches
			runPasses(t, f, MatchAttention(MatchConfig{Result: &res}))
			checkProperties(t, f, &res, files["want"])
			checkSame(t, before, f, formInputs(f), 1e-6)
			if want, ok := files["want.lcc"]; ok || *update {
				got := ir.Print(f)
				if *update {
					writeSection(t, path, ar, "want.lcc", got)
				} else if got != want {
					t.Errorf("IR after match-attention:\n%s\nwant:\n%s", got, want)
				}
			}
		})
	}
}

// formInputs draws random inputs; integer inputs named like a mask get 0/1 with
// the first key always visible, so no query row is fully masked.
func formInputs(f *ir.Func) map[string]*tensor.Tensor {
	in := randomInputs(f, 1000, 3)
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
				got = append(got, fmt.Sprintf("layer %s causal=%t mask=%s scale=%.8g heads=%d/%d",
					a.Node, a.Causal, a.Mask, a.Scale, a.QHeads, a.KVHeads))
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
