package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	cudagen "github.com/lcc-dev/lcc/codegen/cuda"
	"github.com/lcc-dev/lcc/driver"
	"github.com/lcc-dev/lcc/frontends/onnx"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/passes"
	"github.com/lcc-dev/lcc/report"
	"github.com/lcc-dev/lcc/targets"
)

// shapeFlags are the dim-binding flags shared by compile, run and check.
type shapeFlags struct {
	seqLen, batch int64
	shapes        []string
}

func (s *shapeFlags) add(cmd *cobra.Command) {
	cmd.Flags().Int64Var(&s.seqLen, "seq-len", 0, "bind the sequence dim (seq, sequence_length, ...)")
	cmd.Flags().Int64Var(&s.batch, "batch", 0, "bind the batch dim (default 1)")
	cmd.Flags().StringArrayVar(&s.shapes, "shape", nil, "bind a named dim: NAME=VALUE (repeatable)")
}

func (s *shapeFlags) bindings() (driver.Bindings, error) {
	shape, err := driver.ParseShapeFlags(s.shapes)
	if err != nil {
		return driver.Bindings{}, err
	}
	if s.seqLen < 0 {
		return driver.Bindings{}, fmt.Errorf("--seq-len %d: want a positive integer", s.seqLen)
	}
	if s.batch < 0 {
		return driver.Bindings{}, fmt.Errorf("--batch %d: want a positive integer", s.batch)
	}
	return driver.Bindings{SeqLen: s.seqLen, Batch: s.batch, Shape: shape}, nil
}

// attentionFlags are the attention-rewrite and sequence-parallel flags shared by
// compile and check.
type attentionFlags struct {
	mode, offsets       string
	segments, dilations []int64
	require             bool
	ranks               int
	shardMode           string // set by options(): ring, ulysses or dilated
}

func (a *attentionFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&a.mode, "attention", "dense",
		"attention: dense (exact), dilated (LongNet), ring or ulysses (sequence-parallel dense, with --ranks)")
	cmd.Flags().IntVar(&a.ranks, "ranks", 0, "shard the sequence over N GPUs (ranks); default: the target's GPUs when one does not fit")
	cmd.Flags().Int64SliceVar(&a.segments, "segments", nil, "dilated attention segment lengths, e.g. 2048,4096,8192")
	cmd.Flags().Int64SliceVar(&a.dilations, "dilations", nil, "dilated attention dilation rates, e.g. 1,2,4")
	cmd.Flags().StringVar(&a.offsets, "dilated-offsets", "paper", "head offsets of dilated attention: paper or block")
	cmd.Flags().BoolVar(&a.require, "require-attention", false, "make an attention-like subgraph that does not match an error")
}

func (a *attentionFlags) options() (driver.AttentionOptions, error) {
	rewrite, shard, err := driver.ShardModes(a.mode)
	if err != nil {
		return driver.AttentionOptions{}, err
	}
	if a.ranks < 0 {
		return driver.AttentionOptions{}, fmt.Errorf("--ranks %d: want a positive number", a.ranks)
	}
	if (a.mode == "ring" || a.mode == "ulysses") && a.ranks < 2 {
		return driver.AttentionOptions{}, fmt.Errorf("--attention=%s needs --ranks=N with N >= 2", a.mode)
	}
	a.shardMode = shard
	o := driver.AttentionOptions{Mode: rewrite, Segments: a.segments, Dilations: a.dilations,
		Offsets: a.offsets, Require: a.require}
	return o, o.Validate()
}

func lookupTarget(name, file string) (targets.Target, error) {
	if file != "" {
		ts, err := targets.LoadFile(file)
		if err != nil {
			return targets.Target{}, err
		}
		for _, t := range ts {
			if t.Name == name || (name == "" && len(ts) == 1) {
				return t, nil
			}
		}
		return targets.Target{}, fmt.Errorf("--target %q is not in --target-file %s", name, file)
	}
	t, err := targets.Lookup(name)
	if err != nil {
		return targets.Target{}, fmt.Errorf("--target: %w", err)
	}
	return t, nil
}

func compileCmd() *cobra.Command {
	var (
		sf                      shapeFlags
		target, targetFile, out string
		reportFmt, printAfter   string
		loss                    string
		af                      attentionFlags
		checkpoint              string
		budget                  int64
		emit                    []string
		timePasses              bool
	)
	cmd := &cobra.Command{
		Use:   "compile MODEL",
		Short: "compile a model (.onnx or .lcc) for a target: plan, kernels and report, no GPU needed",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if reportFmt != "text" && reportFmt != "json" {
				return fmt.Errorf("--report %q: want text or json", reportFmt)
			}
			if printAfter != "" && printAfter != "all" {
				if _, ok := passes.Lookup(printAfter); !ok {
					return fmt.Errorf("--print-ir-after %q: no such pass (see lcc passes)", printAfter)
				}
			}
			att, err := af.options()
			if err != nil {
				return err
			}
			t, err := lookupTarget(target, targetFile)
			if err != nil {
				return err
			}
			b, err := sf.bindings()
			if err != nil {
				return err
			}
			f, err := driver.Load(args[0], b)
			if err != nil {
				return err
			}
			warnings := driver.Warnings(f)
			copts := driver.CompileOptions{Target: t, PrintAfter: printAfter,
				Model: args[0], Loss: loss, Attention: att, Checkpoint: checkpoint, MemoryBudget: budget,
				TimePasses: timePasses}
			// Sequence parallelism: asked for with --ranks, or planned by default on
			// a multi-GPU target when one GPU cannot hold the step.
			var sharded *driver.ShardPlan
			if af.ranks > 1 {
				if sharded, err = driver.PlanSharded(f, copts, driver.ShardOptions{Ranks: af.ranks, Mode: af.shardMode}); err != nil {
					return err
				}
			}
			unsharded := f.Clone()
			res, err := driver.Compile(f, copts)
			if err != nil {
				return err
			}
			if af.ranks == 0 {
				so, ok := driver.DefaultShard(res.Report, t, af.mode)
				// A multi-GPU target with fewer sequences than GPUs has no data
				// parallelism to use them: split the sequence across all of them.
				if !ok && t.GPUs > 1 && batchOf(res.Report) < int64(t.GPUs) {
					so, ok = driver.ShardOptions{Ranks: t.GPUs, Mode: defaultShardMode(af.mode)}, true
				}
				if ok {
					if sharded, err = driver.PlanSharded(unsharded, copts, so); err != nil {
						return fmt.Errorf("%w (the step does not fit one GPU; pass --ranks=1 to plan it unsharded)", err)
					}
				}
			}
			if sharded != nil {
				rep := res.Report
				rep.Memory = sharded.Memory
				rep.Sharding = &report.Sharding{Ranks: sharded.Ranks, Mode: sharded.Mode, Layout: sharded.Layout,
					SeqLen: sharded.SeqLen, LocalSeqLen: sharded.LocalSeqLen}
				rep.Communication = &report.Communication{BytesPerStepPerGPU: sharded.Communication.BytesPerStepPerGPU,
					ByOp: sharded.Communication.ByOp}
				if sr := sharded.Report; sr != nil {
					// The step that runs is the sharded one: its FLOPs and checkpoints.
					rep.FLOPs = sr.FLOPs
					rep.Checkpoints = sr.Checkpoints
				}
			}
			res.Report.Warnings = warnings
			writeKernels := generateKernels(res, t)
			if sharded != nil {
				// One rank's SPMD program, beside the single-GPU graph the kernels are for.
				res.Report.Sharding.Program = "rank.lcc"
				if _, err := cudagen.Build(sharded.Func, cudagen.Options{Arch: t.Arch}); err != nil && t.Arch != targets.ArchCPU {
					res.Report.KernelError = "sharded step: " + err.Error() +
						" (the kernels listed are those of the single-GPU step)"
				}
				rank := sharded.Func
				writeKernels = append(writeKernels, func(dir string) error {
					return driver.WriteFileAtomic(filepath.Join(dir, "rank.lcc"), []byte(ir.Print(rank)))
				})
			}
			for _, e := range emit {
				switch e {
				case "onnx":
					writeKernels = append(writeKernels, func(dir string) error {
						data, err := onnx.Export(res.Func)
						if err != nil {
							return err
						}
						return driver.WriteFileAtomic(filepath.Join(dir, "graph.onnx"), data)
					})
				case "dot":
					writeKernels = append(writeKernels, func(dir string) error {
						return driver.WriteFileAtomic(filepath.Join(dir, "graph.dot"), []byte(ir.DOT(res.Func)))
					})
				default:
					return fmt.Errorf("--emit %q: want onnx or dot", e)
				}
			}
			if len(emit) > 0 && out == "" {
				return fmt.Errorf("--emit needs -o DIR")
			}
			if out != "" {
				if err := driver.WriteOutputs(out, res, writeKernels...); err != nil {
					return err
				}
			}
			w := cmd.OutOrStdout()
			if reportFmt == "json" {
				js, err := driver.ReportJSON(res.Report)
				if err != nil {
					return err
				}
				_, err = w.Write(js)
				return err
			}
			res.Report.WriteText(w)
			if out != "" {
				fmt.Fprintf(w, "wrote      %s/{graph.lcc,weights.safetensors,report.json}\n", strings.TrimSuffix(out, "/"))
			}
			return nil
		},
	}
	sf.add(cmd)
	af.add(cmd)
	cmd.Flags().BoolVar(&timePasses, "time-passes", false, "include pass timings in the report (then it differs run to run)")
	cmd.Flags().StringSliceVar(&emit, "emit", nil, "also write the rewritten graph: onnx (DIR/graph.onnx, lcc ops in domain ai.lcc), dot (DIR/graph.dot)")
	cmd.Flags().StringVar(&checkpoint, "checkpoint", "auto", "activation checkpointing: auto, none, layers or selective")
	cmd.Flags().Int64Var(&budget, "memory-budget", 0, "activation memory budget per GPU in bytes (default: from the target)")
	cmd.Flags().StringVar(&target, "target", "h200x1", "target machine (see lcc targets)")
	cmd.Flags().StringVar(&targetFile, "target-file", "", "JSON file with extra targets")
	cmd.Flags().StringVarP(&out, "output", "o", "", "write graph.lcc, weights and report.json to this folder")
	cmd.Flags().StringVar(&reportFmt, "report", "text", "report format: text or json")
	cmd.Flags().StringVar(&printAfter, "print-ir-after", "", "print the IR after this pass (or all) to stderr")
	cmd.Flags().StringVar(&loss, "loss", "", "cross-entropy: add mean cross-entropy of the logits and plan training; none: inference")
	return cmd
}

// generateKernels runs the CUDA backend for a GPU target and lists its kernels in
// the report; it returns the writer of DIR/kernels and the launch plan. When an op
// has no GPU lowering the plan stands and the report says which op is missing.
func generateKernels(res *driver.Result, t targets.Target) []func(string) error {
	if t.Arch == "" || t.Arch == targets.ArchCPU {
		return nil
	}
	prog, err := cudagen.Build(res.Func, cudagen.Options{Arch: t.Arch})
	if err != nil {
		res.Report.KernelError = err.Error()
		return nil
	}
	rep := res.Report
	rep.Kernels = rep.Kernels[:0]
	for _, k := range prog.Kernels {
		rep.Kernels = append(rep.Kernels, report.Kernel{Name: k.Name, Op: k.Op})
	}
	for _, st := range prog.Plan.Steps {
		if st.Kind == "gemm" {
			rep.Kernels = append(rep.Kernels, report.Kernel{Name: "cublaslt_gemm", Op: "matmul"})
			break
		}
	}
	return []func(string) error{func(dir string) error {
		return cudagen.WriteKernels(dir, prog.Kernels, prog.Plan)
	}}
}

// batchOf is the bound batch dim of a report (1 when the model has none).
func batchOf(r *report.Report) int64 {
	for _, name := range []string{"batch", "batch_size", "bsz", "B", "N"} {
		if v, ok := r.Shapes.Dims[name]; ok {
			return v
		}
	}
	return 1
}

// defaultShardMode is the sequence-parallel attention for an --attention value.
func defaultShardMode(attention string) string {
	switch attention {
	case "dilated", "ring", "ulysses":
		return attention
	}
	return "ring"
}

func targetsCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "targets",
		Short: "list the built-in targets",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 2, 4, 2, ' ', 0)
			fmt.Fprintln(w, "NAME\tGPUS\tGPU\tARCH\tMEMORY/GPU\tBF16 PEAK\tHBM\tINTERCONNECT")
			for _, t := range targets.All() {
				fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\t%.0f TFLOP/s\t%.2f TB/s\t%.0f GB/s\n", t.Name, t.GPUs, t.GPU,
					t.Arch, report.Bytes(t.MemoryBytes), t.PeakBF16FLOPs/1e12, t.HBMBytesPerSec/1e12,
					t.InterconnectBytesPerSec/1e9)
			}
			return w.Flush()
		},
	}
}

func passesCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "passes",
		Short: "list lcc's passes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ps := append([]passes.Pass{}, passes.Registry...)
			sort.Slice(ps, func(i, j int) bool { return ps[i].Name < ps[j].Name })
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 2, 4, 2, ' ', 0)
			for _, p := range ps {
				fmt.Fprintf(w, "%s\t%s\n", p.Name, p.Doc)
			}
			return w.Flush()
		},
	}
}

var _ = os.Stderr
