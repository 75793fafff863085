package driver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/passes"
	"github.com/lcc-dev/lcc/passes/autodiff"
	"github.com/lcc-dev/lcc/plan"
	"github.com/lcc-dev/lcc/report"
	"github.com/lcc-dev/lcc/safetensors"
	"github.com/lcc-dev/lcc/targets"
	"github.com/lcc-dev/lcc/tensor"
)

// CompileOptions says how to compile.
type CompileOptions struct {
	Target     targets.Target
	PrintAfter string // --print-ir-after
	VerifyEach bool   // --verify-each
	Model      string // the model path, for the report
	// Loss is "" (plan what the model computes: training if it has a scalar
	// output, inference otherwise), "cross-entropy" (add mean cross-entropy of the
	// logits against labels and plan training) or "none" (plan inference only).
	Loss string
}

// Result is what a compile produced.
type Result struct {
	Func   *ir.Func
	Report *report.Report
}

// Pipeline returns the passes a compile runs for the options.
func Pipeline(opts CompileOptions) []passes.Pass {
	return append([]passes.Pass{}, passes.Cleanup...)
}

// Compile runs the pipeline over f and builds the report. For training it appends
// the backward (reverse-mode autodiff) and plans weights, gradients and AdamW state.
func Compile(f *ir.Func, opts CompileOptions) (*Result, error) {
	popts := passes.Options{VerifyEach: true, PrintAfter: opts.PrintAfter}
	stats, err := passes.Run(f, Pipeline(opts), popts)
	if err != nil {
		return nil, err
	}
	train := report.Training{}
	switch opts.Loss {
	case "cross-entropy":
		if err := AddCrossEntropy(f); err != nil {
			return nil, err
		}
		train.Loss = "loss"
	case "", "none":
		if opts.Loss == "" {
			train.Loss = scalarLoss(f)
		}
	default:
		return nil, fmt.Errorf("--loss %q: want cross-entropy or none", opts.Loss)
	}
	if train.Loss != "" {
		train.ForwardFLOPs = countFLOPs(f)
		g, err := autodiff.Grad(f, autodiff.Options{Loss: train.Loss, KeepOutputs: true})
		if err != nil {
			return nil, err
		}
		more, err := passes.Run(g, passes.Cleanup, popts)
		if err != nil {
			return nil, err
		}
		stats = append(stats, passes.Stat{Name: "autodiff", Changed: true})
		stats = append(stats, more...)
		f = g
		train.Enabled = true
	}
	if err := ir.Verify(f); err != nil {
		return nil, err
	}
	rep := report.Build(f, report.Input{Model: filepath.Base(opts.Model), Target: opts.Target,
		Passes: stats, Training: train})
	return &Result{Func: f, Report: rep}, nil
}

func countFLOPs(f *ir.Func) int64 {
	var n int64
	for _, node := range f.Body {
		n += plan.NodeFLOPs(node)
	}
	return n
}

// WriteOutputs writes DIR/graph.lcc, DIR/weights.safetensors and DIR/report.json.
// Every file is written to a temporary name and renamed, so a failure leaves no
// half-written file; files written before a failure are removed.
func WriteOutputs(dir string, res *Result) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("-o %s: %w", dir, err)
	}
	js, err := json.MarshalIndent(res.Report, "", "  ")
	if err != nil {
		return err
	}
	weights, err := EncodeWeights(res.Func)
	if err != nil {
		return err
	}
	files := []struct {
		name string
		data []byte
	}{
		{"graph.lcc", []byte(ir.Print(res.Func))},
		{"weights.safetensors", weights},
		{"report.json", append(js, '\n')},
	}
	var written []string
	for _, f := range files {
		path := filepath.Join(dir, f.name)
		if err := WriteFileAtomic(path, f.data); err != nil {
			for _, w := range written {
				os.Remove(w)
			}
			return err
		}
		written = append(written, path)
	}
	return nil
}

// EncodeWeights serialises the data of every weight and state parameter.
func EncodeWeights(f *ir.Func) ([]byte, error) {
	ts := map[string]*tensor.Tensor{}
	var names []string
	for _, p := range f.Params {
		if p.Data != nil {
			ts[p.Name] = p.Data
			names = append(names, p.Name)
		}
	}
	sort.Strings(names)
	return safetensors.Encode(names, ts, map[string]string{"format": "lcc"})
}

// WriteFileAtomic writes data to path through a temporary file in the same folder,
// fsynced and renamed.
func WriteFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// ReportJSON renders the report as indented JSON.
func ReportJSON(r *report.Report) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	err := enc.Encode(r)
	return buf.Bytes(), err
}
