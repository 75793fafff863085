// Package export writes trained weights out of an lcc checkpoint in forms
// PyTorch users load: a safetensors file keyed by PyTorch's parameter names, so
// that model.load_state_dict(safetensors.torch.load_file(FILE)) works.
//
// The names come from the exporter's provenance, recorded in the checkpoint
// when it was written (checkpoint.Meta.Params): the importer names every weight
// as torch.export's graph signature names its parameter, and a weight the
// exporter folded (an initializer "val_9" = Wᵀ, onnxscript's folded_from) is
// written as the parameter it came from, transposed back. Weights that are not
// parameters (constants the exporter stored as initializers, frozen) are left
// out; the optimizer state is never written.
package export

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/lcc-dev/lcc/frontends/onnx"
	"github.com/lcc-dev/lcc/internal/atomicfile"
	"github.com/lcc-dev/lcc/safetensors"
	"github.com/lcc-dev/lcc/tensor"
	"github.com/lcc-dev/lcc/train/snapshot"
)

// Weights are the trained parameters of a checkpoint under PyTorch's names.
type Weights struct {
	// Names are the parameter names, sorted.
	Names   []string
	Tensors map[string]*tensor.Tensor
	// Skipped lists the checkpoint weights left out, and why.
	Skipped []string
}

// FromCheckpoint maps c's weights to PyTorch's parameter names. A checkpoint
// written before lcc recorded provenance keeps its weights' names.
func FromCheckpoint(c *snapshot.Checkpoint) (*Weights, error) {
	w := &Weights{Tensors: map[string]*tensor.Tensor{}}
	from := map[string]string{} // PyTorch name -> checkpoint name, to report clashes
	ws := c.Weights()
	names := slices.Sorted(maps.Keys(ws))
	for _, name := range names {
		t := ws[name]
		p, ok := c.Meta.Params[name]
		if !ok {
			p = snapshot.Param{Name: name}
		}
		if p.Frozen {
			w.Skipped = append(w.Skipped, name+" (a constant of the exported graph, not a parameter)")
			continue
		}
		if p.Transposed {
			if len(t.Shape) != 2 {
				return nil, fmt.Errorf("%s: weight %q holds the transpose of %q but is %v", c.Path, name,
					p.Name, t.Shape)
			}
			t = transpose2(t)
		}
		if prev, dup := from[p.Name]; dup {
			return nil, fmt.Errorf("%s: weights %q and %q both stand for parameter %q", c.Path, prev, name,
				p.Name)
		}
		from[p.Name] = name
		w.Tensors[p.Name] = t
		w.Names = append(w.Names, p.Name)
	}
	if len(w.Names) == 0 {
		return nil, fmt.Errorf("%s: no trained weights", c.Path)
	}
	sort.Strings(w.Names)
	return w, nil
}

// Safetensors encodes w as a safetensors file with PyTorch's metadata
// ("format": "pt"), the tensors in the dtypes training kept them in.
func (w *Weights) Safetensors(step int) ([]byte, error) {
	return safetensors.Encode(w.Names, w.Tensors, map[string]string{"format": "pt",
		"producer": "lcc export", "step": fmt.Sprint(step)})
}

func transpose2(t *tensor.Tensor) *tensor.Tensor {
	r, c := t.Shape[0], t.Shape[1]
	out := tensor.New(t.DType, c, r)
	for i := range r {
		for j := range c {
			if t.DType.IsFloat() {
				out.F[j*r+i] = t.F[i*c+j]
			} else {
				out.I[j*r+i] = t.I[i*c+j]
			}
		}
	}
	return out
}

// Options say what Run exports.
type Options struct {
	// Format is "safetensors" or "onnx".
	Format string
	// Out is the file written (through a temporary file, fsynced and renamed).
	Out string
	// Step selects a checkpoint; 0 means the newest valid one.
	Step int
}

// Result says what Run wrote.
type Result struct {
	Checkpoint string
	Step       int
	Tensors    int
	Skipped    []string
	// Refused are the newer checkpoints passed over as invalid, and why.
	Refused []snapshot.Skipped
}

// Run exports the trained weights of a checkpoint in dir.
func Run(dir string, o Options) (*Result, error) {
	if o.Format != "safetensors" && o.Format != "onnx" {
		return nil, fmt.Errorf("--format %q: want safetensors or onnx", o.Format)
	}
	c, refused, err := pick(dir, o.Step)
	if err != nil {
		return nil, err
	}
	res := &Result{Checkpoint: c.Path, Step: c.Meta.Step, Refused: refused}
	var data []byte
	switch o.Format {
	case "safetensors":
		w, err := FromCheckpoint(c)
		if err != nil {
			return nil, err
		}
		if data, err = w.Safetensors(c.Meta.Step); err != nil {
			return nil, err
		}
		res.Tensors, res.Skipped = len(w.Names), w.Skipped
	case "onnx":
		if data, res.Tensors, err = onnxWithWeights(c); err != nil {
			return nil, err
		}
	}
	return res, atomicfile.WriteFile(o.Out, data, 0o644)
}

// pick loads the checkpoint of step (for 0, the newest valid one, and the
// newer ones it passed over). Checkpoints are validated as --resume validates
// them, less what only the model can tell (checkpoint.Load).
func pick(dir string, step int) (*snapshot.Checkpoint, []snapshot.Skipped, error) {
	if step > 0 {
		c, err := snapshot.Load(snapshot.Base(dir, step)+".json", snapshot.Want{})
		return c, nil, err
	}
	c, skipped, err := snapshot.Latest(dir, snapshot.Want{})
	if err != nil {
		return nil, nil, err
	}
	if c == nil {
		if len(skipped) > 0 {
			return nil, nil, fmt.Errorf("%s: no valid checkpoint (%d refused; first: %v)", dir,
				len(skipped), skipped[0].Err)
		}
		return nil, nil, fmt.Errorf("%s: no checkpoint", dir)
	}
	return c, skipped, nil
}

// onnxWithWeights writes the model the checkpoint's run trained with its
// trained weights.
func onnxWithWeights(c *snapshot.Checkpoint) ([]byte, int, error) {
	model := c.Meta.Model
	if model == "" || !strings.EqualFold(filepath.Ext(model), ".onnx") {
		return nil, 0, fmt.Errorf("%s: --format=onnx needs the ONNX model the run trained; the checkpoint "+
			"names %q", c.Path, model)
	}
	return onnx.WithWeights(model, c.Weights())
}
