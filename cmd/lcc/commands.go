package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/lcc-dev/lcc/driver"
	"github.com/lcc-dev/lcc/passes"
	"github.com/lcc-dev/lcc/passes/loss"
	"github.com/lcc-dev/lcc/report"
	"github.com/lcc-dev/lcc/targets"
	"github.com/lcc-dev/lcc/train"
)

// shapeFlags are the dim-binding flags shared by compile, run and check.
type shapeFlags struct {
	// 0 leaves a dim to the model (or to --shape); --shape binds dims by name for
	// models whose dims the two shorthands do not recognise.
	seqLen, batch int64
	shapes        []string
}

// add registers --seq-len, --batch and --shape, the flags that bind a model's
// symbolic dims.
func (s *shapeFlags) add(cmd *cobra.Command) {
	// Defaults of 0: an unbound dim stays the model's to fix (or the inputs' for
	// run and check), and the driver binds a batch dim left open to 1.
	cmd.Flags().Int64Var(&s.seqLen, "seq-len", 0, "bind the sequence dim (seq, sequence_length, ...)")
	cmd.Flags().Int64Var(&s.batch, "batch", 0, "bind the batch dim (default 1)")
	cmd.Flags().StringArrayVar(&s.shapes, "shape", nil, "bind a named dim: NAME=VALUE (repeatable)")
}

// bindings turns the shape flags into driver.Bindings, refusing negative sizes
// and malformed --shape entries before any model is read.
func (s *shapeFlags) bindings() (driver.Bindings, error) {
	shape, err := driver.ParseShapeFlags(s.shapes)
	if err != nil {
		return driver.Bindings{}, err
	}
	// 0 is allowed: it means "not given", not an empty sequence.
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
	// mode and the dilated fields feed the attention rewrite; ranks and shardMode
	// decide sequence parallelism, which only ring and ulysses imply by themselves.
	mode, offsets       string
	segments, dilations []int64
	require             bool
	ranks               int
	shardMode           string // set by options(): ring, ulysses or dilated
}

// add registers the attention rewrite's flags: --attention, the dilated
// segments, dilations and offsets, --ranks and --require-attention.
func (a *attentionFlags) add(cmd *cobra.Command) {
	// dense by default: the model's exact attention, so that a plain compile
	// computes what the framework does; dilated changes the math on purpose.
	cmd.Flags().StringVar(&a.mode, "attention", "dense",
		"attention: dense (exact), dilated (LongNet), ring or ulysses (sequence-parallel dense, with --ranks)")
	cmd.Flags().IntVar(&a.ranks, "ranks", 0, rankFlagDoc)
	// nil segments and dilations: the rewrite's LongNet defaults
	// (passes.DefaultDilateConfig), not a copy of them here.
	cmd.Flags().Int64SliceVar(&a.segments, "segments", nil, "dilated attention segment lengths, e.g. 2048,4096,8192")
	cmd.Flags().Int64SliceVar(&a.dilations, "dilations", nil, "dilated attention dilation rates, e.g. 1,2,4")
	cmd.Flags().StringVar(&a.offsets, "dilated-offsets", "paper", "head offsets of dilated attention: paper or block")
	cmd.Flags().BoolVar(&a.require, "require-attention", false, "make an attention-like subgraph that does not match an error")
}

// rankFlagDoc is the help of --ranks; options() implements it.
const rankFlagDoc = "split the sequence over N ranks (1: do not split). Default: with " +
	"--attention=ring or ulysses, all the target's GPUs (compile, train); compile also splits over " +
	"all of a multi-GPU target's GPUs when one GPU cannot hold the step or the batch has fewer " +
	"sequences than GPUs, and replicates a model without attention; check: no split unless given"

// options validates the flags; gpus is the target's GPU count (0 where there is
// no target), which --attention=ring or ulysses without --ranks shards over.
func (a *attentionFlags) options(gpus int) (driver.AttentionOptions, error) {
	// One --attention value names two choices: the rewrite that runs on every rank,
	// and how the sequence is split across ranks.
	rewrite, shard, err := driver.ShardModes(a.mode)
	if err != nil {
		return driver.AttentionOptions{}, err
	}
	if a.ranks < 0 {
		return driver.AttentionOptions{}, fmt.Errorf("--ranks %d: want a positive number", a.ranks)
	}
	// Ring and Ulysses mean nothing on one rank, so without --ranks they take every
	// GPU of the target rather than failing.
	if (a.mode == "ring" || a.mode == "ulysses") && a.ranks == 0 && gpus > 1 {
		a.ranks = gpus
	}
	if (a.mode == "ring" || a.mode == "ulysses") && a.ranks < 2 {
		if gpus == 1 {
			return driver.AttentionOptions{}, fmt.Errorf("--attention=%s needs --ranks=N with N >= 2 "+
				"(the target has one GPU)", a.mode)
		}
		return driver.AttentionOptions{}, fmt.Errorf("--attention=%s needs --ranks=N with N >= 2", a.mode)
	}
	// Kept on the flags: compile and check pass it on beside --ranks.
	a.shardMode = shard
	o := driver.AttentionOptions{Mode: rewrite, Segments: a.segments, Dilations: a.dilations,
		Offsets: a.offsets, Require: a.require}
	// Validate here too, so check and compile refuse bad dilated segments before
	// reading the model, with the flag's name in the message.
	return o, o.Validate()
}

// lookupTarget resolves --target: a built-in target by name, or, with
// --target-file, an entry of that file (the only one when name is empty); the
// error lists the names that exist.
func lookupTarget(name, file string) (targets.Target, error) {
	// With a file, only its entries are candidates, so a name there never resolves
	// to a built-in target of the same name by accident.
	if file != "" {
		ts, err := targets.LoadFile(file)
		if err != nil {
			return targets.Target{}, err
		}
		var names []string
		for _, t := range ts {
			// A file of one target needs no --target.
			if t.Name == name || (name == "" && len(ts) == 1) {
				return t, nil
			}
			names = append(names, t.Name)
		}
		return targets.Target{}, fmt.Errorf("--target %q is not in --target-file %s (it has %s)", name, file,
			strings.Join(names, ", "))
	}
	// Lookup's error lists the built-in names; the prefix names the flag.
	t, err := targets.Lookup(name)
	if err != nil {
		return targets.Target{}, fmt.Errorf("--target: %w", err)
	}
	return t, nil
}

// compileFlags are the flags that choose the pipeline's passes: lcc compile,
// lcc train and lcc passes --pipeline take them with the same meanings.
// Kept in one struct so every command that compiles parses the same flags the
// same way; a step compiled by one runs unchanged under another.
type compileFlags struct {
	af attentionFlags
	// With targetFile, target names one of its entries, never a built-in target.
	target, targetFile string
	loss, checkpoint   string
	// budget 0: the target's memory per GPU.
	budget    byteSize
	precision string
	rope      ropeFlags
	cudaGraph string
	fuse      string
	// optimizerState is --optimizer-state; set before add, it is the flag's
	// default (lcc train's is auto, the others' device).
	optimizerState string
	// optimizerUpdate is --optimizer-update.
	optimizerUpdate string
}

// add registers the pipeline flags lcc compile, check and train share (the
// target, loss, attention, checkpoint policy, memory budget and precision).
func (c *compileFlags) add(cmd *cobra.Command) {
	c.af.add(cmd)
	c.rope.add(cmd)
	f := cmd.Flags()
	// A named machine, not the one lcc runs on: compile needs no GPU. The constant is
	// train's, so compile and train plan for the same target without --target.
	f.StringVar(&c.target, "target", train.DefaultTarget, "target machine (see lcc targets)")
	f.StringVar(&c.targetFile, "target-file", "", "JSON file with extra targets")
	f.StringVar(&c.loss, "loss", loss.Auto, loss.FlagDoc)
	// auto: recompute only as much as the budget demands, so a step that fits keeps
	// every activation and pays no recompute.
	f.StringVar(&c.checkpoint, "checkpoint", "auto", "activation checkpointing: auto (search none, selective, sublayers, layers, then layers+offload, sublayers+offload, then a knapsack, under --memory-budget), none, selective, sublayers, layers, or layers+offload and sublayers+offload (the kept activations wait in pinned host memory, copied on a copy stream)")
	f.Var(&c.budget, "memory-budget",
		"checkpointing bound on the planned per-GPU peak (arena, optimizer state, fixed costs): bytes, or with a unit (80GB, 70GiB); default: the target's memory per GPU")
	// fp32 by default: full-precision storage, which lcc check holds to 1e-4 of the
	// framework's numbers.
	f.StringVar(&c.precision, "precision", "fp32",
		"device storage: fp32, or bf16 (bf16 storage, fp32 math, fp32 master weights and AdamW state)")
	// on: one graph launch replaces a launch per kernel, the host cost that
	// dominates steps of many small kernels.
	f.StringVar(&c.cudaGraph, "cuda-graph", "on", "on: a GPU step whose launch plan allows it is captured "+
		"once as a CUDA graph and replayed (not with --profile); off: launched one by one. Recorded in the plan")
	// off until fused steps have been checked on a GPU (TestGPUFusedStep).
	f.StringVar(&c.fuse, "fuse", "off", "on: after autodiff and checkpointing, groups of elementwise ops "+
		"become one fused_elementwise node each, one kernel that reads each input once and keeps the "+
		"intermediates in registers (the report lists the groups; --print-ir-after=fuse shows them); "+
		"off (the default for now: fused steps match unfused ones on the GPU, but no step time shows them faster yet). Recorded in the plan")
	def := c.optimizerState
	if def == "" {
		def = "device"
	}
	f.StringVar(&c.optimizerState, "optimizer-state", def, "where a GPU training step keeps AdamW's fp32 "+
		"masters and moments: device; host (pinned host memory, the update on the CPU as the gradients come "+
		"down, bit for bit the device's; one micro-step); auto (device unless the step does not fit "+
		"--memory-budget with it). Recorded in the plan")
	f.StringVar(&c.optimizerUpdate, "optimizer-update", "auto", "where AdamW updates a state in host memory: auto (gpu unless its windows do not fit the device budget, then cpu); gpu "+
		"(the state streams up and back through two device windows of at most 48 MiB each, 24 bytes a parameter over "+
		"the link, no CPU work; 1.94x the CPU's speed on an H200 with 16 host cores); cpu (as the gradients "+
		"come down, 4 bytes a parameter over the host link, every core updating). Recorded in the plan")
}

// options validates the flags and returns the target and the pipeline options.
func (c *compileFlags) options() (targets.Target, driver.Options, error) {
	t, err := lookupTarget(c.target, c.targetFile)
	if err != nil {
		return targets.Target{}, driver.Options{}, err
	}
	// The target first: ring and ulysses without --ranks take its GPU count.
	att, err := c.af.options(t.GPUs)
	if err != nil {
		return targets.Target{}, driver.Options{}, err
	}
	rope, err := c.rope.config()
	if err != nil {
		return targets.Target{}, driver.Options{}, err
	}
	o := driver.Options{Loss: c.loss, Attention: att, Checkpoint: c.checkpoint, MemoryBudget: int64(c.budget),
		Precision: c.precision, Ranks: c.af.ranks, ShardMode: c.af.shardMode, RoPE: rope,
		CUDAGraph: c.cudaGraph, OptimizerState: c.optimizerState, OptimizerUpdate: c.optimizerUpdate, Fuse: c.fuse}
	// Build the pass list once and drop it: this surfaces flag combinations that no
	// pipeline supports as flag errors, before a model is loaded.
	if _, err := driver.Pipeline(t, o); err != nil {
		return targets.Target{}, driver.Options{}, err
	}
	return t, o, nil
}

// compileCmd is `lcc compile`: the pipeline over a model for a target, its
// report, and with -o a folder swapped in whole (program, weights, kernels,
// launch plan, manifest).
func compileCmd() *cobra.Command {
	var (
		sf shapeFlags
		cf compileFlags
		// out "" reports only: compile writes nothing unless asked for a folder.
		out                   string
		reportFmt, printAfter string
		emit                  []string
		timePasses            bool
		measured              string
		// --rank and --host-memory-budget stay outside compileFlags: train gives the
		// budget another meaning on the CPU, and only compile lists one rank.
		rank       int
		hostBudget byteSize
	)
	cmd := &cobra.Command{
		Use:   "compile MODEL",
		Short: "compile a model (.onnx or .lcc) for a target: plan, kernels and report, no GPU needed",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			// Every flag check comes before the model is read: importing a large model is slow.
			if reportFmt != "text" && reportFmt != "json" {
				return fmt.Errorf("--report %q: want text or json", reportFmt)
			}
			if err := checkPrintAfter(printAfter); err != nil {
				return err
			}
			var files []string // what driver.WriteFolder emits; memory is drawn here
			plotMemory := false
			for _, e := range emit {
				switch e {
				case "onnx", "dot":
					files = append(files, e)
				case "memory":
					plotMemory = true
				default:
					return fmt.Errorf("--emit %q: want onnx, dot or memory", e)
				}
			}
			// Every --emit output is a file in the -o folder; without one there is nowhere to put it.
			if len(emit) > 0 && out == "" {
				return fmt.Errorf("--emit needs -o DIR")
			}
			// --measured only adds a line to the memory plot; alone it would be silently ignored.
			if measured != "" && !plotMemory {
				return fmt.Errorf("--measured needs --emit=memory")
			}
			if out != "" {
				if err := checkOutputDir("-o", out); err != nil {
					return err
				}
			}
			// Before cf.options: recorded flags of a compiled step must be set before the
			// flags are read.
			if err := applyRecorded(cmd, args[0]); err != nil {
				return err
			}
			t, o, err := cf.options()
			if err != nil {
				return err
			}
			o.Rank, o.HostMemoryBudget = rank, int64(hostBudget)
			// Bound at load: the passes plan memory and kernels for concrete shapes.
			b, err := sf.bindings()
			if err != nil {
				return err
			}
			f, err := driver.Load(args[0], b)
			if err != nil {
				return err
			}
			// Warnings are about the model as loaded, before passes rewrite it away. They go
			// into the report (text and JSON), not to stderr, so --report=json carries them.
			warnings := driver.Warnings(f)
			res, err := driver.Compile(f, driver.CompileOptions{Options: o, Target: t, PrintAfter: printAfter,
				// DefaultShard lets compile split over a multi-GPU target's GPUs when one cannot
				// hold the step (see rankFlagDoc); check and run do not.
				Model: args[0], TimePasses: timePasses, DefaultShard: true})
			if err != nil {
				return err
			}
			res.Report.Warnings = warnings
			res.Report.Notes = f.Remarks
			// The folder before the report: a failed write is then the command's error,
			// not a report printed for files that do not exist.
			if out != "" {
				wo := driver.OutputOptions{Emit: files}
				if plotMemory {
					// The plot is drawn inside WriteFolder so it lands in the folder before the
					// folder is swapped in whole.
					wo.Extra = func(dir string) error {
						return writeMemoryPlot(filepath.Join(dir, "memory.png"), args[0], res, measured)
					}
				}
				if err := driver.WriteFolder(out, res, wo); err != nil {
					return err
				}
			}
			w := cmd.OutOrStdout()
			// JSON goes out alone so it can be piped into jq; the "wrote" line is text only.
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
				fmt.Fprintf(w, "wrote      %s/{%s}\n", strings.TrimSuffix(out, "/"), strings.Join(written(out), ","))
			}
			return nil
		},
	}
	sf.add(cmd)
	cf.add(cmd)
	addHostBudget(cmd, &hostBudget)
	// Rank 0 by default: it exists in every plan, sharded or not.
	cmd.Flags().IntVar(&rank, "rank", 0, "with a sharded plan: the rank whose program the report lists and "+
		"-o writes (ops, kernels, launch plan, program hash; rank.lcc)")
	// Off by default: a report without timings is the same run to run, so two
	// compiles' reports diff cleanly.
	cmd.Flags().BoolVar(&timePasses, "time-passes", false, "include pass timings in the report (then it differs run to run)")
	cmd.Flags().StringSliceVar(&emit, "emit", nil, "also write the rewritten graph: onnx (DIR/graph.onnx, lcc ops in domain ai.lcc), dot (DIR/graph.dot); or memory (DIR/memory.png: planned memory over the step's schedule)")
	cmd.Flags().StringVar(&measured, "measured", "", "with --emit=memory: a --metrics JSONL of lcc train whose measured peak (measured_peak_bytes) is drawn as a line")
	cmd.Flags().StringVarP(&out, "output", "o", "", "write graph.lcc, weights, kernels and report.json to this folder")
	// text for a person; json (report.json's schema) for scripts and jq.
	cmd.Flags().StringVar(&reportFmt, "report", "text", "report format: text or json")
	cmd.Flags().StringVar(&printAfter, "print-ir-after", "", "print the IR after this pass (or all) to stderr")
	return cmd
}

// written lists the files and folders compile -o wrote to dir, in the order of
// driver.OutputFiles, then the manifest.
func written(dir string) []string {
	var out []string
	for _, name := range append(slices.Clone(driver.OutputFiles), "manifest.json") {
		// List only what exists: which files are written depends on target and flags.
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			out = append(out, name)
		}
	}
	return out
}

// checkPrintAfter validates --print-ir-after against the registered passes.
func checkPrintAfter(name string) error {
	// Empty prints nothing and all prints after every pass; neither names a pass.
	if name == "" || name == "all" {
		return nil
	}
	if _, ok := passes.Lookup(name); !ok {
		return fmt.Errorf("--print-ir-after %q: no such pass (see lcc passes)", name)
	}
	return nil
}

// targetsCmd is `lcc targets`: the built-in targets and what each holds.
func targetsCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "targets",
		Short: "list the built-in targets",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Fixed units per column (TFLOP/s, TB/s, GB/s), so targets compare at a glance.
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

// passesCmd is `lcc passes`: every registered pass, or with --pipeline the pass
// list the given compile flags run, one `name key=value` line each.
func passesCmd() *cobra.Command {
	var (
		cf       compileFlags
		pipeline bool
	)
	cmd := &cobra.Command{
		Use:   "passes [--pipeline [COMPILE FLAGS]]",
		Short: "list lcc's passes, or with --pipeline the passes a compile with these flags runs",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			w := cmd.OutOrStdout()
			// --pipeline goes through cf.options and driver.Pipeline, as compile does, so
			// the list printed is the one compile runs, not a description kept beside it.
			if pipeline {
				t, o, err := cf.options()
				if err != nil {
					return err
				}
				ps, err := driver.Pipeline(t, o)
				if err != nil {
					return err
				}
				_, err = io.WriteString(w, driver.Describe(ps))
				return err
			}
			seen := map[string]bool{}
			var ps []passes.Pass
			for _, p := range passes.Registry {
				if !seen[p.Name] {
					seen[p.Name] = true
					ps = append(ps, p)
				}
			}
			// Sorted by name, not registry order, so the list is stable as passes are added.
			sort.Slice(ps, func(i, j int) bool { return ps[i].Name < ps[j].Name })
			tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
			for _, p := range ps {
				fmt.Fprintf(tw, "%s\t%s\n", p.Name, p.Doc)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&pipeline, "pipeline", false, "print the pass list of lcc compile/train with the flags given")
	// Every pipeline flag compile takes, so --pipeline answers for exactly the flags a
	// compile would be given.
	cf.add(cmd)
	return cmd
}
