package train

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/lcc-dev/lcc/internal/fserr"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
	"github.com/lcc-dev/lcc/train/snapshot"
)

// wantCheckpoint is what a checkpoint of this run must hold.
func (t *trainer) wantCheckpoint() snapshot.Want {
	w := snapshot.Want{ParamsHash: t.hash, Tensors: map[string]ir.Type{}}
	for _, p := range t.grad.Params {
		if p.Role == ir.RoleWeight {
			w.Tensors[p.Name] = p.Value.Type
		}
	}
	for _, p := range t.upd.Func.Params {
		if p.Role == ir.RoleState {
			w.Tensors[optimPrefix+p.Name] = p.Value.Type
		}
	}
	return w
}

// settings are the flags that shape the computation after a checkpoint; a resume
// that changes one cannot match a straight run, and says so. seq_len is the
// exception: a new length is what progressive training means (see resume).
func (t *trainer) settings() map[string]any {
	c := t.cfg
	return map[string]any{"steps": c.Steps, "lr": c.LR, "min_lr": c.MinLR, "warmup": c.Warmup,
		"weight_decay": c.WeightDecay, "clip": c.Clip, "accumulate": c.Accumulate, "seed": c.Seed,
		"loss": c.Loss, "ranks": max(c.Ranks, 1), "attention": attentionSetting(c),
		"precision": c.Precision, "seq_len": c.SeqLen, "batch": c.Batch}
}

// resume restores the newest valid checkpoint and returns its step. A folder
// that does not exist is an error (a mistyped path must not start a new run);
// an empty one starts from step 0 with a warning.
func (t *trainer) resume(res *Result) (int, error) {
	dir := t.cfg.CheckpointDir
	if st, err := os.Stat(dir); err != nil {
		return 0, fmt.Errorf("--resume: --checkpoint-dir %s: %w (nothing to resume; without --resume a new "+
			"run starts there)", dir, fserr.Cause(err))
	} else if !st.IsDir() {
		return 0, fmt.Errorf("--resume: --checkpoint-dir %s is a file, not a folder", dir)
	}
	c, skipped, err := t.resumeFrom(dir)
	if err != nil {
		return 0, err
	}
	for _, s := range skipped {
		fmt.Fprintf(t.cfg.Progress, "resume: skipping %s: %v\n", s.Path, s.Err)
	}
	if c == nil {
		if len(skipped) > 0 {
			return 0, fmt.Errorf("--resume: no valid checkpoint in %s (%d refused; first: %v)", dir,
				len(skipped), skipped[0].Err)
		}
		warn := t.cfg.Log
		if warn == nil || t.rank != 0 {
			warn = t.cfg.Progress
		}
		fmt.Fprintf(warn, "lcc: warning: --resume: %s holds no checkpoint; starting from step 0\n", dir)
		return 0, nil
	}
	if err := t.stream.Restore(c.Meta.Data); err != nil {
		return 0, fmt.Errorf("--resume %s: %w", c.Path, err)
	}
	for name := range t.weights {
		t.weights[name] = c.Tensors[name]
	}
	for name := range t.state {
		t.state[name] = c.Tensors[optimPrefix+name]
	}
	// JSON numbers decode as float64, so compare through a JSON round trip.
	var now map[string]any
	js, _ := json.Marshal(t.settings())
	json.Unmarshal(js, &now)
	for _, k := range sortedKeys(now) {
		old, ok := c.Meta.Config[k]
		switch {
		case !ok || old == now[k]:
		case k == "seq_len":
			fmt.Fprintf(t.cfg.Progress, "resume: --seq-len %v -> %v: the same parameters and AdamW state "+
				"(step %d) go on in the new length's program %s\n", old, now[k], c.Meta.Step, t.program)
		default:
			fmt.Fprintf(t.cfg.Progress, "resume: %s changed from %v to %v; the run will not match a "+
				"straight run bit for bit\n", k, old, now[k])
		}
	}
	res.Resumed, t.resumedLine = c.Path, c.Meta.Metrics
	fmt.Fprintf(t.cfg.Progress, "resume: %s (step %d, loss %.4f)\n", c.Path, c.Meta.Step, c.Meta.Loss)
	return c.Meta.Step, nil
}

// save writes a checkpoint of the host state after step and prunes old ones;
// line is the step's --metrics line (see meta).
func (t *trainer) save(step int, loss float64, line []byte) (string, error) {
	ts := make(map[string]*tensor.Tensor, len(t.weights)+len(t.state))
	for k, v := range t.weights {
		ts[k] = v
	}
	for k := range t.state {
		ts[optimPrefix+k] = t.stateTensor(k)
	}
	return t.write(step, t.meta(loss, line), ts)
}

// meta is the JSON half of a checkpoint taken now, after a step of loss whose
// --metrics line (its checkpoint's costs aside, not known yet) is line.
func (t *trainer) meta(loss float64, line []byte) snapshot.Meta {
	return snapshot.Meta{Data: t.stream.State(), LCCVersion: t.cfg.Version, ParamsHash: t.hash,
		Loss: loss, Config: t.settings(), Model: absPath(t.cfg.Model), Params: frameworkParams(t.grad),
		Metrics: line}
}

// write writes the checkpoint of step and prunes old ones.
func (t *trainer) write(step int, m snapshot.Meta, ts map[string]*tensor.Tensor) (string, error) {
	path, err := snapshot.Save(t.cfg.CheckpointDir, step, m, ts)
	if err != nil {
		return "", err
	}
	return path, snapshot.Prune(t.cfg.CheckpointDir, t.cfg.Keep)
}

// checkpoint takes the checkpoint of step: in the background for a resident
// run (its path reaches res.Checkpoints once written), else at once. line is
// the step's --metrics line, which the checkpoint keeps (see meta).
func (t *trainer) checkpoint(res *Result, step int, loss float64, line []byte) (checkpointStats, error) {
	t0 := time.Now()
	if t.dev != nil && t.dev.saver != nil {
		if err := t.finishSave(res); err != nil {
			return checkpointStats{}, err
		}
		t1 := time.Now()
		_, d0 := t.cfg.Session.Device().Transferred()
		err := t.startSave(step, loss, line)
		_, d1 := t.cfg.Session.Device().Transferred()
		return checkpointStats{wait: time.Since(t0), write: t1.Sub(t0), bytes: d1 - d0}, err
	}
	p, err := t.save(step, loss, line)
	if err != nil {
		return checkpointStats{}, err
	}
	res.Checkpoints = append(res.Checkpoints, p)
	return checkpointStats{wait: time.Since(t0)}, nil
}

// absPath is path made absolute, as far as it can be.
func absPath(path string) string {
	if a, err := filepath.Abs(path); err == nil {
		return a
	}
	return path
}

// frameworkParams records, for each weight of f, the framework parameter it is.
func frameworkParams(f *ir.Func) map[string]snapshot.Param {
	out := map[string]snapshot.Param{}
	for _, p := range f.Params {
		if p.Role != ir.RoleWeight {
			continue
		}
		c := snapshot.Param{Name: p.Name, Frozen: p.Frozen}
		if p.Origin != "" {
			c.Name, c.Transposed = p.Origin, p.OriginTransposed
		}
		out[p.Name] = c
	}
	return out
}

// sortedKeys are m's keys in order, for messages in a fixed order.
func sortedKeys(m map[string]any) []string {
	return slices.Sorted(maps.Keys(m))
}
