// Package driver wires lcc's stages together for the command line and for Go
// programs that want the same behaviour: load a model (ONNX or text IR), bind its
// symbolic dims, run the pass pipeline for a target, and write the results.
//
// The CLI in cmd/lcc only parses flags and calls this package, so everything the
// CLI can do is available, and tested, as Go.
package driver

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/lcc-dev/lcc/frontends/onnx"
	"github.com/lcc-dev/lcc/internal/userfile"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/safetensors"
	"github.com/lcc-dev/lcc/tensor"
)

// seqNames and batchNames are the dim_param names --seq-len and --batch bind.
// Exporters spell them differently (torch.export's "s0" aside, which needs --shape).
var (
	seqNames   = []string{"seq", "seq_len", "seqlen", "sequence", "sequence_length", "seq_length", "tokens", "T"}
	batchNames = []string{"batch", "batch_size", "bsz", "B", "N"}
)

// Bindings holds what the user said about symbolic dims.
type Bindings struct {
	SeqLen int64            // --seq-len; 0 when not given
	Batch  int64            // --batch; 0 when not given
	Shape  map[string]int64 // --shape name=value
	// InputShapes fixes whole input shapes (lcc check and run take them from the
	// tensors they are given).
	InputShapes map[string][]int64
	// InputValues are the given input tensors (check, run): integer inputs that
	// decide shapes are bound to them (onnx.ImportOptions.InputValues).
	InputValues map[string]*tensor.Tensor
	// InputsFrom names the file InputShapes came from, for errors.
	InputsFrom string
}

// ParseShapeFlags parses --shape values "name=value" (several may be given, each
// possibly comma-separated).
func ParseShapeFlags(vals []string) (map[string]int64, error) {
	out := map[string]int64{}
	for _, v := range vals {
		for _, kv := range strings.Split(v, ",") {
			k, s, ok := strings.Cut(strings.TrimSpace(kv), "=")
			var n int64
			if _, err := fmt.Sscan(s, &n); !ok || k == "" || err != nil || n <= 0 {
				return nil, fmt.Errorf("--shape %q: want name=positive-integer", kv)
			}
			if prev, dup := out[k]; dup && prev != n {
				return nil, fmt.Errorf("--shape gives %s twice: %d and %d", k, prev, n)
			}
			out[k] = n
		}
	}
	return out, nil
}

// dims resolves the bindings against the dim names the model actually uses;
// static is the model's static batch, when it has one (staticBatch).
func (b Bindings) dims(used []string, static *staticDim) (map[string]int64, error) {
	dims := map[string]int64{}
	has := map[string]bool{}
	for _, u := range used {
		has[u] = true
	}
	bind := func(flag string, v int64, names []string) error {
		if v == 0 {
			return nil
		}
		if v < 0 {
			return fmt.Errorf("%s %d: want a positive integer", flag, v)
		}
		found := false
		for _, n := range names {
			if has[n] {
				dims[n] = v
				found = true
			}
		}
		// A model may name the dim otherwise (torch.export's "s70"): a --shape that binds
		// some dim to the same size says which dim the flag means.
		if !found && len(used) > 0 && !slices.Contains(slices.Collect(maps.Values(b.Shape)), v) {
			return fmt.Errorf("%s: the model has no dim named %s (its dims: %s); use --shape NAME=%d",
				flag, strings.Join(names[:3], ", "), strings.Join(used, ", "), v)
		}
		return nil
	}
	if err := bind("--seq-len", b.SeqLen, seqNames); err != nil {
		return nil, err
	}
	switch {
	case static != nil && b.Batch != 0 && b.Batch != static.size:
		return nil, fmt.Errorf("--batch %d: the model's batch is static: dim 0 of input %q is %d (torch.export "+
			"specialises a dim whose example size is 1); use --batch %d, or export with a dynamic batch",
			b.Batch, static.input, static.size, static.size)
	case static != nil:
		// The model's own batch: nothing to bind.
	default:
		if err := bind("--batch", b.Batch, batchNames); err != nil {
			return nil, err
		}
	}
	for k, v := range b.Shape {
		if !has[k] && len(used) > 0 {
			return nil, fmt.Errorf("--shape %s=%d: the model has no dim %q (its dims: %s)", k, v, k,
				strings.Join(used, ", "))
		}
		dims[k] = v
	}
	// Batch defaults to 1: long-context training runs one sequence per GPU. Given
	// input tensors (check, run) bind it themselves.
	for _, n := range batchNames {
		if _, ok := dims[n]; !ok && has[n] && b.InputShapes == nil {
			dims[n] = 1
		}
	}
	return dims, nil
}

// Load reads a model: an .onnx file (decoded, validated, lowered with dims bound)
// or an .lcc text IR file (whose weights, if any, come from a safetensors file of
// the same base name, or weights.safetensors beside it).
func Load(path string, b Bindings) (*ir.Func, error) {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".onnx":
		m, err := onnx.Load(path, onnx.LoadOptions{})
		if err != nil {
			return nil, err
		}
		dims, err := b.dims(dimNames(m), staticBatch(m))
		if err != nil {
			return nil, err
		}
		f, err := onnx.Import(m, onnx.ImportOptions{Dims: dims, InputShapes: b.InputShapes,
			InputValues: b.InputValues, Consume: true})
		if err != nil && errors.Is(err, onnx.ErrUnboundDim) && b.InputsFrom != "" {
			if missing := missingInputs(m, b.InputShapes); len(missing) > 0 {
				var has []string
				for name := range b.InputShapes {
					has = append(has, name)
				}
				sort.Strings(has)
				return nil, fmt.Errorf("%s: no tensor named like model input(s) %s (the file has: %s), "+
					"so their shapes are unknown", b.InputsFrom, strings.Join(missing, ", "),
					strings.Join(has, ", "))
			}
		}
		return f, err
	case ".lcc":
		return loadText(path)
	}
	return nil, fmt.Errorf("%s: unknown model format (want .onnx or .lcc)", path)
}

// missingInputs lists the model's graph inputs (initializers aside) that shapes
// has no entry for.
func missingInputs(m *onnx.Model, shapes map[string][]int64) []string {
	var out []string
	for _, in := range m.Graph.Inputs {
		if _, init := m.Graph.Initializers[in.Name]; init {
			continue
		}
		if _, ok := shapes[in.Name]; !ok {
			out = append(out, in.Name)
		}
	}
	return out
}

// staticDim is a dim an input fixes: its size and the input's name.
type staticDim struct {
	size  int64
	input string
}

// staticBatch returns the model's static batch: dim 0 of its inputs when no
// input names a batch dim (batchNames) and every input of rank >= 2 has the
// same fixed size there (a model exported with one example sequence); nil
// otherwise.
func staticBatch(m *onnx.Model) *staticDim {
	var out *staticDim
	for _, in := range m.Graph.Inputs {
		if _, init := m.Graph.Initializers[in.Name]; init || len(in.Dims) < 2 {
			continue
		}
		d := in.Dims[0]
		switch {
		case d.Param != "" && slices.Contains(batchNames, d.Param):
			return nil
		case !d.Known || d.Value <= 0 || (out != nil && out.size != d.Value):
			return nil
		case out == nil:
			out = &staticDim{size: d.Value, input: in.Name}
		}
	}
	return out
}

func dimNames(m *onnx.Model) []string {
	seen := map[string]bool{}
	var out []string
	for _, in := range m.Graph.Inputs {
		for _, d := range in.Dims {
			if d.Param != "" && !seen[d.Param] {
				seen[d.Param] = true
				out = append(out, d.Param)
			}
		}
	}
	sort.Strings(out)
	return out
}

func loadText(path string) (*ir.Func, error) {
	// A compiled folder is read only when it is as the compile wrote it, so
	// that no loader runs a mix of two compiles or an edited file.
	if err := verifySealed(path); err != nil {
		return nil, err
	}
	src, err := userfile.ReadFile(path)
	if err != nil {
		return nil, err
	}
	f, err := ir.Parse(string(src))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var weights string
	for _, cand := range []string{strings.TrimSuffix(path, filepath.Ext(path)) + ".safetensors",
		filepath.Join(filepath.Dir(path), "weights.safetensors")} {
		if _, err := os.Stat(cand); err == nil {
			weights = cand
			break
		}
	}
	if weights == "" {
		return f, nil
	}
	st, err := safetensors.Read(weights)
	if err != nil {
		return nil, err
	}
	for _, p := range f.Params {
		if p.Role != ir.RoleWeight && p.Role != ir.RoleState {
			continue
		}
		t, ok := st.Tensors[p.Name]
		if !ok {
			continue
		}
		if !ir.T(t.DType, t.Shape...).Equal(p.Value.Type) {
			return nil, fmt.Errorf("%s: weight %q is %v%v, the graph declares %v", weights, p.Name,
				t.DType, t.Shape, p.Value.Type)
		}
		p.Data = t
	}
	return f, nil
}

// CheckWeights refuses f when a weight or state parameter has no data: a model
// file without its weights, which every runner needs before it can start. The
// error names them all, so that one run shows what the file lacks.
func CheckWeights(f *ir.Func) error {
	var missing []string
	for _, p := range f.Params {
		if (p.Role == ir.RoleWeight || p.Role == ir.RoleState) && p.Data == nil {
			missing = append(missing, p.Name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("weights without data: %s", strings.Join(missing, ", "))
	}
	return nil
}

// CheckTrainable refuses a model that would not train as its framework trains
// it: one with framework parameters the import could not give a weight of their
// own (ir.Func.Untrained), which training would leave frozen or tied.
func CheckTrainable(f *ir.Func) error {
	if len(f.Untrained) == 0 {
		return nil
	}
	return fmt.Errorf("%d PyTorch parameter(s) have no weight of their own in this export, so training it "+
		"would not train them as PyTorch does: %s. The exporter's optimizer merged or folded them (it merges "+
		"parameters with equal initial values, then the nodes reading them, and folds a parameter's "+
		"arithmetic into constants); export with torch.onnx.export(..., optimize=False), or give those "+
		"parameters distinct initial values before exporting", len(f.Untrained), strings.Join(f.Untrained, ", "))
}

// Warnings lists what looks wrong in a loaded model without being an error: an
// input that nothing reads (after import only its shape was used). PyTorch's
// exporter produces this when two example inputs were the same tensor, such as
// labels = input_ids: torch.export aliases them, and every use reads one name.
func Warnings(f *ir.Func) []string {
	uses := f.Uses()
	out := append([]string(nil), f.Notes...)
	for _, p := range f.Params {
		if (p.Role == ir.RoleInput || p.Role == ir.RoleLabel) && len(uses[p.Value]) == 0 && !f.IsOutput(p.Value) {
			out = append(out, fmt.Sprintf("input %q is never read (only its shape is); if the exporter's "+
				"example inputs aliased it with another input of the same shape, the graph reads that one instead", p.Name))
		}
	}
	return out
}
