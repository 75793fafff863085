// Package eval measures a trained model (`lcc eval`): perplexity over held-out
// windows of a token file, and pass-key retrieval over context lengths and
// needle depths (Mohtashami and Jaggi, "Landmark Attention", 2023; the
// needle-in-a-haystack heat maps of Kamradt, 2023), on the CPU interpreter or a
// GPU runner.
//
// Invariants:
//   - The model is the one lcc check runs: loaded with its dims bound to the
//     length evaluated, through driver.PrepareWith, so --rope-theta and
//     --rope-scaling rewrite its frequencies as they do for lcc compile and
//     train (per length: dynamic scaling depends on it); a checkpoint folder's
//     newest valid checkpoint supplies its weights (the run's model is the one
//     its meta names), as lcc export reads it.
//   - Losses are the mean cross-entropy of the logits against the next tokens,
//     in float64 from the logits the run returns, per window; the mean loss is
//     the mean over windows (each has SeqLen targets, so it is the token mean),
//     and the perplexity exp(mean loss).
//   - Windows are those `lcc train --data tokens:FILE` reads from the start of the
//     file at --seq-len: window k covers tokens [k·T, k·T+T], the first N of W.
//   - Pass-key prompts are synthetic:passkey's (data.Passkey), drawn from a seed
//     per (length, depth) cell, so a run is a pure function of its flags;
//     accuracy is teacher-forced: the share of key digits whose position's
//     argmax is the digit.
package eval

import (
	"fmt"
	"io"
	"math"
	"os"
	"strings"

	"github.com/lcc-dev/lcc/driver"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/passes"
	"github.com/lcc-dev/lcc/passes/loss"
	"github.com/lcc-dev/lcc/tensor"
	"github.com/lcc-dev/lcc/train/snapshot"
)

// Options say which model to evaluate, and where.
type Options struct {
	// Model is an .onnx or .lcc file, or a folder of lcc train checkpoints.
	Model string
	// Batch binds the model's batch dim (0: the model's static batch, else 1).
	Batch int
	Shape map[string]int64
	// Run executes the forward (the CLI's GPU runner); nil is the CPU
	// interpreter in f32 under HostBudget.
	Run        driver.Runner
	HostBudget driver.HostBudget
	// Release, if set, frees what Run holds for a forward once evaluated (a
	// GPU session's arena), before the next length's.
	Release func(*ir.Func)
	// Log gets the model's warnings and which checkpoint was read (nil: none).
	Log io.Writer
	// RoPE is --rope-theta and --rope-scaling (the zero value keeps the model's
	// frequencies). A checkpoint does not record the RoPE its run trained with,
	// so evaluating one takes the run's flags again.
	RoPE passes.RoPEConfig
}

// model is the forward at one length, ready to run.
type model struct {
	f              *ir.Func
	tokens, labels string // the input parameters' names ("" labels: none)
	logits         string
	positions      int // logits rows per sequence: seqLen, or the tail kept
	batch          int
	vocab          int64
	rope           *passes.RoPEResult // what rescale-rope rewrote (nil: no RoPE flags)
}

// weights reads the checkpoint of a folder Model: the model file its run
// trained and its weights; ("", nil) for a model file.
func (o Options) weights() (string, map[string]*tensor.Tensor, error) {
	st, err := os.Stat(o.Model)
	if err != nil || !st.IsDir() {
		return "", nil, nil
	}
	c, skipped, err := snapshot.Latest(o.Model, snapshot.Want{})
	if err != nil {
		return "", nil, err
	}
	if c == nil {
		if len(skipped) > 0 {
			return "", nil, fmt.Errorf("%s: no valid checkpoint (%d refused; first: %v)", o.Model,
				len(skipped), skipped[0].Err)
		}
		return "", nil, fmt.Errorf("%s: a folder without checkpoints (want a model file or an lcc train "+
			"--checkpoint-dir)", o.Model)
	}
	if c.Meta.Model == "" {
		return "", nil, fmt.Errorf("%s: the checkpoint names no model file", c.Path)
	}
	if o.Log != nil {
		fmt.Fprintf(o.Log, "eval: %s (step %d) of %s\n", c.Path, c.Meta.Step, c.Meta.Model)
	}
	ws := map[string]*tensor.Tensor{}
	for name, t := range c.Tensors {
		if !strings.HasPrefix(name, snapshot.OptimPrefix) {
			ws[name] = t
		}
	}
	return c.Meta.Model, ws, nil
}

// load loads the model at seqLen with the checkpoint's weights ws (nil: its own).
// With tail > 0 the logits output keeps only positions seqLen−1−tail ..
// seqLen−2, those that predict the last tail tokens (a pass key's digits): a
// GPU run then brings back tail rows of logits, not seqLen. The other outputs
// are dropped either way.
func (o Options) load(path string, ws map[string]*tensor.Tensor, seqLen, tail int) (*model, error) {
	f, err := driver.Load(path, driver.Bindings{SeqLen: int64(seqLen), Batch: int64(o.Batch), Shape: o.Shape})
	if err != nil {
		return nil, err
	}
	for _, p := range f.Params {
		if p.Role != ir.RoleWeight || ws == nil {
			continue
		}
		t := ws[p.Name]
		if t == nil {
			return nil, fmt.Errorf("%s: the checkpoint has no weight %q", o.Model, p.Name)
		}
		if !ir.T(t.DType, t.Shape...).Equal(p.Value.Type) {
			return nil, fmt.Errorf("%s: weight %q is %v in the checkpoint, %v in %s", o.Model, p.Name,
				ir.T(t.DType, t.Shape...), p.Value.Type, path)
		}
		p.Data = t
	}
	if miss := driver.MissingWeights(f); len(miss) > 0 {
		return nil, fmt.Errorf("%s: weights without data: %s", path, strings.Join(miss, ", "))
	}
	prep, err := driver.PrepareWith(f, driver.Options{RoPE: o.RoPE}, passes.Options{})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	m := &model{f: f, rope: prep.RoPE}
	vocab, ok := loss.Vocab(f)
	if !ok {
		return nil, fmt.Errorf("%s: cannot tell the vocabulary (no embedding gather of a token input)", path)
	}
	m.vocab = vocab
	out, err := loss.Logits(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	m.logits, m.positions = out.Name, seqLen
	lv := out.Value
	if tail > 0 {
		lv = ir.Edit(f).Apply1(ir.OpSlice, ir.A("axes", []int64{1}, "starts", []int64{int64(seqLen - 1 - tail)},
			"ends", []int64{int64(seqLen - 1)}, "steps", []int64{1}), lv)
		m.positions = tail
	}
	f.Outputs = []ir.Output{{Name: out.Name, Value: lv}}
	f.RemoveDeadNodes()
	if err := ir.Verify(f); err != nil {
		return nil, fmt.Errorf("lcc: BUG: eval: the forward's logits: %w", err)
	}
	for _, p := range f.Params {
		var slot *string
		switch p.Role {
		case ir.RoleInput:
			slot = &m.tokens
		case ir.RoleLabel:
			slot = &m.labels
		default:
			continue
		}
		t := p.Value.Type
		if *slot != "" || !t.DType.IsInt() || t.Rank() != 2 || t.Shape[1] != int64(seqLen) {
			return nil, fmt.Errorf("%s: lcc eval feeds one token input [batch, %d] (and labels); %s %q is %v",
				path, seqLen, p.Role, p.Name, t)
		}
		*slot, m.batch = p.Name, int(t.Shape[0])
	}
	if m.tokens == "" {
		return nil, fmt.Errorf("%s: no token input (an integer [batch, seq] input parameter)", path)
	}
	return m, nil
}

// forward runs m on ids ([batch, T] token ids) and returns its logits
// [batch, T, vocab]; labels are fed to a model that takes them.
func (o Options) forward(m *model, ids, labels *tensor.Tensor) (*tensor.Tensor, error) {
	in := map[string]*tensor.Tensor{m.tokens: ids}
	if m.labels != "" {
		in[m.labels] = labels
	}
	var (
		out map[string]*tensor.Tensor
		err error
	)
	if o.Run != nil {
		out, err = o.Run(m.f, in)
	} else {
		out, err = driver.RunCPU(m.f, in, tensor.F32, o.HostBudget)
	}
	if err != nil {
		return nil, err
	}
	lg := out[m.logits]
	if want := ids.Shape[0] * int64(m.positions) * m.vocab; lg == nil || int64(len(lg.F)) != want {
		return nil, fmt.Errorf("lcc: BUG: eval: the forward returned no logits %q of %d values", m.logits, want)
	}
	return lg, nil
}

// release frees what the runner holds for m.
func (o Options) release(m *model) {
	if o.Release != nil {
		o.Release(m.f)
	}
}

// crossEntropy is −log softmax(row)[label] in float64.
func crossEntropy(row []float64, label int64) float64 {
	mx := math.Inf(-1)
	for _, v := range row {
		mx = max(mx, v)
	}
	var sum float64
	for _, v := range row {
		sum += math.Exp(v - mx)
	}
	return mx + math.Log(sum) - row[label]
}

// argmax is the index of row's largest value (the first of equals).
func argmax(row []float64) int64 {
	best := 0
	for i, v := range row {
		if v > row[best] {
			best = i
		}
	}
	return int64(best)
}
