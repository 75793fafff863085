package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/spf13/cobra"

	"github.com/lcc-dev/lcc/driver"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/passes"
	"github.com/lcc-dev/lcc/report"
	"github.com/lcc-dev/lcc/safetensors"
	"github.com/lcc-dev/lcc/tensor"
)

// runCmd is `lcc run`: the model's forward on given inputs, on the CPU
// interpreter or GPU 0, outputs written to a safetensors file.
func runCmd() *cobra.Command {
	var (
		sf              shapeFlags
		inputs, outputs string
		df              deviceFlags
		rf              ropeFlags
	)
	cmd := &cobra.Command{
		Use:   "run MODEL --inputs X.safetensors",
		Short: "run a model on given inputs and print or save its outputs",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			// Before the run: a path that cannot be written must not cost the forward.
			if err := checkOutputs(outputs); err != nil {
				return err
			}
			run, release, err := df.runner()
			if err != nil {
				return err
			}
			defer release()
			if inputs == "" {
				return fmt.Errorf("--inputs is required")
			}
			// Flag errors before the model is read, naming the flag.
			rope, err := rf.config()
			if err != nil {
				return err
			}
			b, err := sf.bindings()
			if err != nil {
				return err
			}
			// The inputs' shapes bind the model's dims, so a model whose inputs fix them
			// runs without --seq-len or --batch.
			in, shapes, err := driver.ReadRef(inputs)
			if err != nil {
				return err
			}
			b.InputShapes, b.InputValues, b.InputsFrom = shapes, in.Tensors, inputs
			f, err := driver.Load(args[0], b)
			if err != nil {
				return err
			}
			// Warnings, not errors: Feeds converts float-stored token ids that are whole
			// numbers, and refuses the others itself.
			for _, w := range driver.RefWarnings(f, in, inputs) {
				fmt.Fprintf(cmd.ErrOrStderr(), "lcc: warning: %s\n", w)
			}
			// Every input and label must be in the file: a missing one is listed, never
			// zero-filled.
			feeds, err := driver.Feeds(f, in, inputs)
			if err != nil {
				return err
			}
			// run executes the model as imported, without check's forward pipeline:
			// rescale-rope is the one rewrite it asks for.
			if err := printRoPE(cmd, f, rope); err != nil {
				return err
			}
			outs, err := run(f, feeds)
			if err != nil {
				return err
			}
			// The model's output order, not the map's, so that two runs print alike.
			var names []string
			for _, o := range f.Outputs {
				names = append(names, o.Name)
			}
			w := cmd.OutOrStdout()
			for _, n := range names {
				t := outs[n]
				fmt.Fprintf(w, "%s %v%s %s\n", n, t.DType, tensor.ShapeString(t.Shape), summary(t))
			}
			if outputs != "" {
				return writeOutputs(outputs, outs, "lcc run")
			}
			return nil
		},
	}
	sf.add(cmd)
	// No default: run feeds only the tensors it is given, never made-up inputs.
	cmd.Flags().StringVar(&inputs, "inputs", "", "safetensors file with one tensor per model input")
	cmd.Flags().StringVar(&outputs, "outputs", "", "write the outputs to this safetensors file")
	df.add(cmd)
	rf.add(cmd)
	return cmd
}

// printRoPE applies --rope-theta and --rope-scaling to f (lcc run) and says on
// stderr what they rewrote.
func printRoPE(cmd *cobra.Command, f *ir.Func, c passes.RoPEConfig) error {
	res, err := driver.ApplyRoPE(f, c)
	if err != nil || res == nil {
		return err
	}
	for _, l := range report.RoPELines(*res) {
		fmt.Fprintf(cmd.ErrOrStderr(), "lcc: rope: %s\n", l)
	}
	return nil
}

// checkOutputs checks the --outputs file of run and check before they run.
func checkOutputs(path string) error {
	if path == "" {
		return nil
	}
	return checkOutputFile("--outputs", path)
}

// writeOutputs writes every tensor of outs to path, in name order, so that two runs
// that computed the same bits write the same bytes.
func writeOutputs(path string, outs map[string]*tensor.Tensor, producer string) error {
	// checkOutputs found the folder creatable before the run.
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("--outputs %s: %w", path, err)
	}
	names := make([]string, 0, len(outs))
	for n := range outs {
		names = append(names, n)
	}
	sort.Strings(names)
	return safetensors.Write(path, names, outs, map[string]string{"producer": producer})
}

// summary prints a few statistics of a tensor: enough to see a NaN, a tensor of
// zeros or a blow-up at a glance (lcc check compares the values themselves).
func summary(t *tensor.Tensor) string {
	n := t.Numel()
	if n == 0 {
		return "(empty)"
	}
	// t.Float reads every dtype as float64, integer outputs included.
	var sum, mn, mx float64
	mn, mx = t.Float(0), t.Float(0)
	for i := 0; i < n; i++ {
		v := t.Float(i)
		sum += v
		mn, mx = min(mn, v), max(mx, v)
	}
	return fmt.Sprintf("mean=%.6g min=%.6g max=%.6g", sum/float64(n), mn, mx)
}

// checkCmd is `lcc check`: the model (and with --grads its gradients) against a
// framework's reference, on the CPU or GPU, in the storage --precision picks.
func checkCmd() *cobra.Command {
	var (
		sf        shapeFlags
		ref       string
		df        deviceFlags
		tolerance float64
		grads     bool
		af        attentionFlags
		outputs   string
		rf        ropeFlags
	)
	cmd := &cobra.Command{
		Use:   "check MODEL --ref REF.safetensors",
		Short: "run a model on a reference's inputs and compare its outputs with the reference",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if ref == "" {
				return fmt.Errorf("--ref is required")
			}
			if err := checkOutputs(outputs); err != nil {
				return err
			}
			// --attention-kernels chooses among GPU kernels: refused on the CPU rather
			// than silently ignored there.
			switch {
			case df.attentionKernels != "auto" && df.attentionKernels != "scalar":
				return fmt.Errorf("--attention-kernels %q: want auto or scalar", df.attentionKernels)
			case df.attentionKernels == "scalar" && df.device != "cuda":
				return fmt.Errorf("--attention-kernels=scalar chooses GPU kernels: it needs --device=cuda")
			}
			// The default follows --precision: fp32's 1e-4 would fail every bf16 check.
			if !cmd.Flags().Changed("tolerance") {
				tolerance = df.defaultTolerance()
			}
			if !(tolerance > 0) {
				return fmt.Errorf("--tolerance %g: want a positive number", tolerance)
			}
			// check has no target, so 0 GPUs: ring and ulysses need an explicit --ranks.
			att, err := af.options(0)
			if err != nil {
				return err
			}
			rope, err := rf.config()
			if err != nil {
				return err
			}
			b, err := sf.bindings()
			if err != nil {
				return err
			}
			// As for run, the reference's inputs bind the model's dims.
			refs, shapes, err := driver.ReadRef(ref)
			if err != nil {
				return err
			}
			b.InputShapes, b.InputValues, b.InputsFrom = shapes, refs.Tensors, ref
			f, err := driver.Load(args[0], b)
			if err != nil {
				return err
			}
			for _, w := range driver.RefWarnings(f, refs, ref) {
				fmt.Fprintf(cmd.ErrOrStderr(), "lcc: warning: %s\n", w)
			}
			// Before the passes, as in compile: the warnings are about the model as
			// loaded, which the pipeline rewrites.
			for _, w := range driver.Warnings(f) {
				fmt.Fprintf(cmd.ErrOrStderr(), "lcc: warning: %s\n", w)
			}
			for _, n := range f.Remarks {
				fmt.Fprintf(cmd.ErrOrStderr(), "lcc: note: %s\n", n)
			}
			// Verified after every pass: a pass that breaks the IR is then named, instead of
			// surfacing later as a numeric mismatch against the reference.
			prep, err := driver.PrepareWith(f, driver.Options{Attention: att, RoPE: rope}, passes.Options{VerifyEach: true})
			if err != nil {
				return err
			}
			// On stderr, as run's: stdout is the comparison, one line per tensor.
			if prep.RoPE != nil {
				for _, l := range report.RoPELines(*prep.RoPE) {
					fmt.Fprintf(cmd.ErrOrStderr(), "lcc: rope: %s\n", l)
				}
			}
			// Opened after the passes: a model the pipeline refuses costs no GPU session.
			run, programs, release, err := df.runnerWithPrograms()
			if err != nil {
				return err
			}
			defer release()
			storage, err := df.storage()
			if err != nil {
				return err
			}
			copts := driver.CheckOptions{Tolerance: tolerance, Out: cmd.OutOrStdout(), Run: run,
				Storage: storage, HostBudget: driver.NewHostBudget(int64(df.hostBudget)), Program: programs}
			if df.device == "cpu" {
				copts.Run = nil // the driver's own CPU run (it emulates a narrower storage)
			}
			var res *driver.CheckResult
			switch {
			case af.ranks > 1:
				// driver.CheckSharded simulates the ranks on the CPU interpreter in f32 only.
				if df.device != "cpu" || storage != tensor.F32 {
					return fmt.Errorf("--ranks=%d: sharded checks run on the CPU in f32 with N simulated ranks; "+
						"use --device=cpu --precision=fp32", af.ranks)
				}
				if outputs != "" {
					return fmt.Errorf("--outputs: not with --ranks=%d (the ranks' results are compared, not kept)", af.ranks)
				}
				copts.Run = nil
				_, err = driver.CheckSharded(f, refs, ref, driver.ShardOptions{Ranks: af.ranks, Mode: af.shardMode, Grads: grads}, copts)
			case grads:
				res, err = driver.CheckGrads(f, refs, ref, copts)
			default:
				res, err = driver.Check(f, refs, ref, copts)
			}
			// The results are written even when they are beyond the tolerance: they
			// are what one looks at then. The mismatch stays the error; a failed write
			// is reported only when the check itself passed.
			if outputs != "" && res != nil {
				if werr := writeOutputs(outputs, res.Outputs, "lcc check"); werr != nil && err == nil {
					err = werr
				}
			}
			return err
		},
	}
	sf.add(cmd)
	af.add(cmd)
	rf.add(cmd)
	cmd.Flags().StringVar(&ref, "ref", "", "reference safetensors: inputs by input name, outputs by output name")
	df.add(cmd)
	cmd.Flags().Float64Var(&tolerance, "tolerance", 1e-4, "largest accepted ‖a−ref‖/‖ref‖ (default 2e-2 with --precision=bf16)")
	cmd.Flags().StringVar(&df.attentionKernels, "attention-kernels", "auto",
		"cuda attention kernels: auto (the tensor-core tier where it applies) or scalar (CUDA cores everywhere, to compare with)")
	cmd.Flags().StringVar(&outputs, "outputs", "",
		"write what lcc computed (outputs; with --grads the loss and every grad.<name>) to this safetensors file")
	// The forward alone by default: --grads adds the backward, which costs about
	// twice the forward.
	cmd.Flags().BoolVar(&grads, "grads", false,
		"also differentiate (REF dy: Σ out⊙dy; a scalar output; REF labels: cross-entropy) and compare loss and grad.<name>")
	return cmd
}
