package train

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime/debug"

	"github.com/lcc-dev/lcc/driver"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/passes"
	"github.com/lcc-dev/lcc/passes/loss"
	"github.com/lcc-dev/lcc/tensor"
)

// Step compiles the training step cfg trains: the model loaded with cfg's
// bindings, through the pipeline lcc compile runs with the same flags
// (driver.CompileStep). Its Hash is the program hash lcc compile reports.
func Step(cfg Config) (*driver.Result, error) {
	model, err := loadModel(cfg)
	if err != nil {
		return nil, err
	}
	return compileStep(cfg, model, cfg.compileOptions())
}

// loadModel loads cfg's model with cfg's bindings, printing its warnings and
// the importer's notes to cfg.Log.
func loadModel(cfg Config) (*ir.Func, error) {
	bind := driver.Bindings{SeqLen: int64(cfg.SeqLen), Batch: int64(cfg.Batch), Shape: cfg.Shape}
	model, err := driver.Load(cfg.Model, bind)
	if err != nil {
		return nil, err
	}
	// What the load leaves is garbage beside the weights: an inline model's file
	// and raw_data bytes, half the size of its decoded weights. Collected now,
	// before the optimizer's state is allocated in its place, it does not ride on
	// top of the host peak the plan counts (issue #26).
	debug.FreeOSMemory()
	if cfg.Log != nil {
		for _, w := range driver.Warnings(model) {
			fmt.Fprintf(cfg.Log, "lcc: warning: %s\n", w)
		}
		for _, n := range model.Remarks {
			fmt.Fprintf(cfg.Log, "lcc: note: %s\n", n)
		}
	}
	if err := driver.CheckTrainable(model); err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.Model, err)
	}
	if err := driver.CheckWeights(model); err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.Model, err)
	}
	return model, nil
}

// compileStep is Step of the model loadModel loaded, compiled with opts (cfg's,
// or those of a recompile for the device).
func compileStep(cfg Config, model *ir.Func, opts driver.CompileOptions) (*driver.Result, error) {
	res, err := driver.CompileStep(model, opts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.Model, err)
	}
	if res.Loss == "" {
		return nil, fmt.Errorf("%s: --loss=%s: nothing to train: the model has no loss output and no "+
			"logits to add cross-entropy to (outputs: %s)", cfg.Model, cfg.Loss, loss.OutputList(res.Func))
	}
	return res, nil
}

// modelBatch is the batch f was bound to when --batch was not given: dim 0 of
// its first input (1 for a named batch dim, else the model's static batch).
func modelBatch(f *ir.Func) int {
	for _, p := range f.Params {
		if p.Role == ir.RoleInput && len(p.Value.Type.Shape) > 0 {
			return int(p.Value.Type.Shape[0])
		}
	}
	return 1
}

// ParamsHash identifies what a checkpoint holds, the parameters: the SHA-256
// of the names, dtypes and shapes of the weights and optimizer state of the
// step grad and its update upd (their values are what training changes). It is all a resume must
// agree on. The program (--seq-len, --batch, the graph's bound shapes, --loss,
// --attention, --precision, --ranks, the checkpoint policy, the target) is not
// part of it: a resume at a new --seq-len (progressive length training) or with
// another attention rewrite compiles the new program, prints its hash and
// continues the same parameters and AdamW state; the changes that make the run
// differ from a straight one are printed (settings).
func ParamsHash(grad, upd *ir.Func) string {
	h := sha256.New()
	for _, p := range grad.Params {
		if p.Role == ir.RoleWeight {
			fmt.Fprintf(h, "%s %v\n", p.Name, p.Value.Type)
		}
	}
	for _, p := range upd.Params {
		if p.Role == ir.RoleState {
			fmt.Fprintf(h, "state %s %v\n", p.Name, p.Value.Type)
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// bindData finds the token input and the label parameter the batches feed, and
// checks they are [batch, seq].
func (t *trainer) bindData(f *ir.Func) error {
	whole := ir.T(tensor.I64, int64(t.cfg.Batch), int64(t.cfg.SeqLen))
	for _, p := range f.Params {
		want := whole
		if t.shard != nil {
			// A rank's program takes its share of a sharded input.
			if _, ok := t.shard.Layout.Inputs[p.Name]; ok {
				want = ir.T(tensor.I64, int64(t.cfg.Batch), int64(t.cfg.SeqLen/t.shard.Layout.Ranks))
			}
		}
		var slot *string
		switch {
		case p.Name == passes.DocStartsInput && p.Role == ir.RoleInput:
			if !p.Value.Type.Equal(want) {
				return fmt.Errorf("input %q is %v; lcc train feeds doc starts %v", p.Name, p.Value.Type, want)
			}
			continue
		case p.Role == ir.RoleInput:
			slot = &t.tokens
		case p.Role == ir.RoleLabel:
			slot = &t.labels
		default:
			continue
		}
		if *slot != "" {
			return fmt.Errorf("%s %q: lcc train feeds one token input and one label input, found also %q",
				p.Role, p.Name, *slot)
		}
		if !p.Value.Type.Equal(want) {
			return fmt.Errorf("%s %q is %v; lcc train feeds token ids %v (--batch, --seq-len)",
				p.Role, p.Name, p.Value.Type, want)
		}
		*slot = p.Name
	}
	if t.tokens == "" {
		return errors.New("no token input (an i64 [batch, seq] input parameter)")
	}
	return nil
}
