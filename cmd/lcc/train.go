package main

import (
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lcc-dev/lcc/driver"
	"github.com/lcc-dev/lcc/perf"
	"github.com/lcc-dev/lcc/report"
	"github.com/lcc-dev/lcc/runtime/exec"
	"github.com/lcc-dev/lcc/targets"
	"github.com/lcc-dev/lcc/tensor"
	"github.com/lcc-dev/lcc/train"
	"github.com/lcc-dev/lcc/train/runner"
)

// trainCmd is `lcc train`: it parses flags into a train.Config and runs it.
func trainCmd() *cobra.Command {
	// The flags write into cfg, so the defaults --help shows are train's own
	// (train.DefaultConfig), not a second copy that could drift from them.
	cfg := train.DefaultConfig()
	// compile's flag set, parsed the same way: train compiles the program lcc
	// compile reports for the same flags, and prints the same hash. Only
	// --optimizer-state's default differs: train's plan may move the state.
	cf := compileFlags{optimizerState: "auto"}
	var commTimeout time.Duration
	var plotPath string
	var profile, sharedGPU bool
	var shapes []string
	// One flag, two bounds: the interpreter's heap on the CPU, the planned host
	// peak on a GPU (see RunE).
	var hostBudget byteSize
	// Parsed in RunE into cfg.SeqLenSchedule; train refuses it beside --seq-len.
	var seqLenSchedule string
	cmd := &cobra.Command{
		Use:   "train MODEL --data=SPEC --seq-len N --batch N --steps N --lr X",
		Short: "train a model (.onnx or .lcc): AdamW, warmup+cosine, checkpoints, bit-identical resume",
		Long: `train compiles the model into a training step with the pipeline lcc compile runs
for the same flags (--target, --loss, --attention, --segments, --dilations,
--dilated-offsets, --checkpoint, --memory-budget, --precision, --ranks: LongNet
attention, fused cross-entropy, activation checkpoints), prints its program hash
(the one lcc compile reports), and trains it with AdamW on the CPU interpreter in
f32 (--device=cpu) or on GPU 0 (--device=cuda). A step compiled by lcc compile -o
DIR trains as DIR/graph.lcc: the same program and losses, its flags taken from
DIR/report.json (a flag that contradicts it is refused).

Data specs: synthetic:copy[:ALPHABET], synthetic:passkey, tokens:FILE (token ids,
uint16 or uint32 little-endian, no header: nanoGPT's train.bin; --token-bytes),
bytes:FILE (raw bytes; vocabulary >= 256).

The learning rate warms up linearly over --warmup steps, then follows a cosine to
--min-lr at --steps. Checkpoints (--checkpoint-dir) hold weights, optimizer state,
the data position and RNG; --resume continues from the newest valid one bit for
bit. To split one run, keep --steps and stop the first part with --stop-at.
A resume may change --seq-len (progressive length): the parameters and optimizer
state go on in the new length's program (a new hash); only other weights' names,
dtypes or shapes are refused. --seq-len-schedule runs such stages in one command.
SIGINT (Ctrl-C) or SIGTERM stops after the step in flight, with a checkpoint of it,
and exits 130 or 143; a second one exits at once.

--ranks=N shards each step's sequence over N ranks (--attention=ring, ulysses or
dilated), one goroutine per rank in this process; every rank ends the step with
the all-reduced gradient, and rank 0 writes the (consolidated) checkpoints.
Started by a launcher (torchrun --no-python lcc train ..., or srun), each process
is one rank: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT (or SLURM's
variables) place it; rank 0 listens on MASTER_ADDR:MASTER_PORT (the port after it
when torchrun's agent holds it: TORCHELASTIC_USE_AGENT_STORE=True), the others
join, and on the CPU the ranks exchange tensors over TCP. Set LCC_COMM_SECRET to the
same value on every rank so that only processes that hold it can join. A rank that
dies, fails or stays silent for --comm-timeout ends every other rank with an error
naming it; --comm-timeout also bounds the rendezvous.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) (err error) {
			cfg.Model = args[0]
			// The flags that parse alone first: a typo costs no compile.
			if cfg.Shape, err = driver.ParseShapeFlags(shapes); err != nil {
				return err
			}
			if seqLenSchedule != "" {
				if cfg.SeqLenSchedule, err = train.ParseSeqLenSchedule(seqLenSchedule); err != nil {
					return err
				}
			}
			// Progress lines and the summary are the run's output; warnings and notes go to
			// stderr, so that piping stdout to a file keeps only the former.
			cfg.Progress = cmd.OutOrStdout()
			cfg.Log = cmd.ErrOrStderr()
			// Recorded in every checkpoint, to tell which lcc wrote it.
			cfg.Version = version
			// The interpreter allocates a tensor per op; the live heap is small, so a
			// lazier GC buys ~15% of step time. A GPU run is the opposite: its host heap
			// is the model's weights (pointer-free slices, cheap to mark), and with the
			// default GC the garbage of compiling and uploading them grew to a third of
			// the model beside it (the 3B Llama at 512K: 87.14 GiB measured against a
			// plan of 78.56, 2026-12-02). Collecting at 10% growth keeps the heap near
			// what the plan counts (issue #26). An explicit GOGC still wins.
			if _, set := os.LookupEnv("GOGC"); !set {
				gc := 400
				if cfg.Device == "cuda" {
					gc = 10
				}
				defer debug.SetGCPercent(debug.SetGCPercent(gc))
			}
			// The output paths first: a run must not train for hours and then find that it
			// cannot write its checkpoint or plot.
			if err := checkTrainOutputs(cfg, plotPath); err != nil {
				return err
			}
			// Before cf.options, as in compile: a compiled step's recorded flags fill in the
			// flags not given before they are read.
			if err := applyRecorded(cmd, cfg.Model); err != nil {
				return err
			}
			// Caught before the compile, so that a Ctrl-C during it is not lost: train
			// polls cfg.Stop after each step and stops with a checkpoint, not killed.
			stop := stopOnSignals(cmd.ErrOrStderr())
			defer stop.release()
			cfg.Stop = stop.stop
			// A launcher (torchrun, srun) makes this process one rank of several; without
			// one the ranks, if any, are goroutines of this process.
			env, launched, err := runner.EnvFrom(os.Getenv)
			if err != nil {
				return fmt.Errorf("launcher environment: %w", err)
			}
			if launched && !cmd.Flags().Changed("ranks") {
				cf.af.ranks = env.WorldSize // the launcher says how many ranks there are
			}
			t, o, err := cf.options()
			if err != nil {
				return err
			}
			// train.Config holds the pipeline options field by field (it also trains
			// without the CLI); each one compile takes must be copied here, or train
			// silently compiles another program than lcc compile reports.
			cfg.Target, cfg.Loss, cfg.Attention, cfg.Checkpoint = t, o.Loss, o.Attention, o.Checkpoint
			cfg.MemoryBudget, cfg.Precision, cfg.Ranks, cfg.ShardMode = o.MemoryBudget, o.Precision, o.Ranks, o.ShardMode
			cfg.RoPE = o.RoPE
			cfg.CUDAGraph, cfg.OptimizerState, cfg.Fuse = o.CUDAGraph, o.OptimizerState, o.Fuse
			cfg.OptimizerUpdate = o.OptimizerUpdate
			precision := o.Precision
			if cfg.Device == "cuda" {
				// A GPU step plans its host side under the flag (none: the measured
				// limits are checked at run time, the plan is lcc compile's).
				cfg.HostMemoryBudget = int64(hostBudget)
			}
			if cfg.Device == "cpu" {
				whole := driver.NewHostBudget(int64(hostBudget))
				cfg.HostBudget = whole
				if !launched {
					// The ranks are goroutines of this process: they share its memory.
					cfg.HostBudget = whole.Share(cfg.Ranks)
				}
				// The lazy GC above must not carry the heap past the budget the step
				// was checked against: near it, collect sooner. GOMEMLIMIT still wins.
				if _, set := os.LookupEnv("GOMEMLIMIT"); !set && whole.Bytes > 0 {
					defer debug.SetMemoryLimit(debug.SetMemoryLimit(whole.Bytes))
				}
			}
			var res *train.Result
			// cf.options has validated --precision: fp32 or bf16.
			storage := tensor.F32
			if precision == "bf16" {
				storage = tensor.BF16
			}
			switch {
			case launched && cfg.Device == "cuda":
				// One process per GPU: NCCL through the rendezvous, the step on GPU LOCAL_RANK.
				res, err = runner.ProcessGPU(cfg, env, commTimeout, storage)
			case cfg.Ranks > 1 && cfg.Device == "cuda" && sharedGPU:
				// Test and development mode: every rank on GPU 0, devlocal's communicator.
				res, err = runner.SharedGPU(cfg, commTimeout, storage)
			case cfg.Ranks > 1 && cfg.Device == "cuda":
				// One goroutine per GPU, each with its NCCL rank.
				res, err = runner.LocalGPU(cfg, commTimeout, storage)
			default:
				if profile && cfg.Device != "cuda" {
					return fmt.Errorf("--profile times GPU kernels: it needs --device=cuda")
				}
				res, err = trainHere(cfg, precision, env, launched, commTimeout, profile)
			}
			if err != nil {
				return err
			}
			// Rank 0 writes the checkpoints and prints the summary; another rank only ends
			// with its stop's status.
			if launched && env.Rank != 0 {
				return stopped(stop, res, false) // rank 0 prints the summary
			}
			// The plot and the summary of a stopped run are still written: they show the
			// steps that ran, and the stop's exit status comes after them.
			if plotPath != "" {
				if err := plotLoss(plotPath, cfg, res, cmd.ErrOrStderr()); err != nil {
					return err
				}
			}
			if err := trainSummary(cmd, res); err != nil {
				return err
			}
			return stopped(stop, res, cfg.CheckpointDir != "")
		},
	}
	cf.add(cmd)
	addHostBudget(cmd, &hostBudget)
	// Defaults below that read cfg's fields are train.DefaultConfig's; a literal 0
	// means "not given": train then refuses the run (--seq-len, --steps) or takes
	// the documented default (--batch: 1 or the model's static batch).
	f := cmd.Flags()
	f.BoolVar(&profile, "profile", false, "with --device=cuda: print the wall-clock step time and the GPU "+
		"time per kernel family per step (CUDA events)")
	f.BoolVar(&sharedGPU, "shared-gpu", false, "test and development mode: with --ranks=N --device=cuda, run "+
		"every rank on GPU 0 with an in-process device communicator instead of NCCL (one GPU per rank)")
	f.StringVar(&plotPath, "plot", "", "draw the loss of every step of this run to FILE (.png, .svg or .pdf)")
	// A minute: a peer silent that long is taken for dead, so that one failed rank
	// does not hold the others idle until the job's time limit.
	f.DurationVar(&commTimeout, "comm-timeout", runner.DefaultTimeout,
		"with --ranks: a rank that waits this long for a peer (rendezvous or collective) fails, naming it")
	// Off: the step trained must be the one compiled and hashed for --target, unless
	// this flag asks for another program.
	f.BoolVar(&cfg.RecompileForDevice, "recompile-for-device", false, "with --device=cuda: compile the step "+
		"for the GPU found (its arch, --target's other properties kept) when --target's arch differs, "+
		"printing the new program hash; without it a program the GPU cannot run is refused")
	// The CPU by default: the reference interpreter runs anywhere, and a GPU run is
	// then a choice the command line shows.
	f.StringVar(&cfg.Device, "device", cfg.Device, "where to train: cpu (reference interpreter, f32) or cuda (GPU 0, state resident there; --precision picks fp32 or bf16 storage)")
	f.StringVar(&cfg.Data, "data", "",
		"training data: synthetic:copy, synthetic:passkey, tokens:FILE or bytes:FILE")
	f.IntVar(&cfg.SeqLen, "seq-len", 0, "tokens per sequence (binds the model's seq dim); a --resume "+
		"at another --seq-len continues the checkpoint's parameters and AdamW state in the new program")
	f.StringVar(&seqLenSchedule, "seq-len-schedule", "", "progressive length instead of --seq-len: "+
		"LEN:STEPS,...,LEN (65536:200,262144:400,1048576), each stage compiled for its length, one "+
		"learning-rate schedule over --steps")
	f.IntVar(&cfg.Batch, "batch", 0, "sequences per micro-batch (binds the model's batch dim; default 1, "+
		"or the model's static batch, which a given --batch must equal)")
	f.StringArrayVar(&shapes, "shape", nil, "bind a named dim: NAME=VALUE (repeatable), as lcc compile does")
	f.IntVar(&cfg.Steps, "steps", 0, "optimizer steps; the learning-rate schedule spans them")
	f.IntVar(&cfg.StopAt, "stop-at", 0,
		"stop after this step (checkpointing there), keeping the schedule of --steps")
	f.Float64Var(&cfg.LR, "lr", cfg.LR, "peak learning rate")
	// -1: lr/10, the floor of nanoGPT's and Chinchilla's cosine, whatever --lr is.
	f.Float64Var(&cfg.MinLR, "min-lr", cfg.MinLR,
		"learning rate at the end of the cosine (negative: lr/10)")
	f.IntVar(&cfg.Warmup, "warmup", cfg.Warmup, "linear warmup steps")
	// 0.01 and a clip of 1: PyTorch's AdamW default and the usual GPT-style clip.
	f.Float64Var(&cfg.WeightDecay, "weight-decay", cfg.WeightDecay, "AdamW decoupled weight decay")
	f.Float64Var(&cfg.Clip, "clip", cfg.Clip, "clip the global gradient norm to this (0: off)")
	f.IntVar(&cfg.Accumulate, "accumulate", cfg.Accumulate,
		"micro-batches per optimizer step (gradient accumulation)")
	// 2: nanoGPT's uint16 train.bin; a vocabulary past 65536 ids needs 4.
	f.IntVar(&cfg.TokenBytes, "token-bytes", cfg.TokenBytes,
		"bytes per token of tokens:FILE: 2 (uint16) or 4 (uint32)")
	// -1 is off: every token id from 0 up may be a real token.
	f.Int64Var(&cfg.DocSep, "doc-sep", cfg.DocSep, "pack whole documents of tokens:FILE or bytes:FILE, "+
		"each ending with this token id, into every sequence: attention masked to each document, "+
		"positions restarting there, no target across documents (-1: off)")
	// The data stream's seed only: the initial weights are the model file's, so a run
	// repeats from its flags and its model.
	f.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "seed of the data stream")
	f.StringVar(&cfg.Metrics, "metrics", "",
		"write one JSON line per step (step, loss, lr, grad_norm, tokens_per_s) to this file")
	f.StringVar(&cfg.CheckpointDir, "checkpoint-dir", "",
		"write checkpoints here (and resume from here)")
	// 0: a checkpoint at the last step (or a stop) only, since each one copies the
	// whole training state out.
	f.IntVar(&cfg.CheckpointEvery, "checkpoint-every", 0,
		"checkpoint every N steps (and always at the last step)")
	// 3: a torn newest checkpoint still leaves two older valid ones to resume from,
	// and the disk does not fill with every step's.
	f.IntVar(&cfg.Keep, "keep", cfg.Keep, "keep the newest N checkpoints (0: all)")
	f.BoolVar(&cfg.Resume, "resume", false,
		"continue from the newest valid checkpoint in --checkpoint-dir")
	// Every 10 steps: a long run's log stays short enough to read.
	f.IntVar(&cfg.ProgressEvery, "progress-every", cfg.ProgressEvery,
		"print a progress line every N steps (0: never)")
	return cmd
}

// trainHere trains in this process: its goroutine ranks (runner.Local), or its
// rank of a launched CPU run (runner.Process), on the device of cfg.
func trainHere(cfg train.Config, precision string, env runner.Env, launched bool,
	timeout time.Duration, profile bool) (*train.Result, error) {
	// The device flags lcc run and check take, rebuilt from train's own: the same
	// runners, so a step runs here as the forward runs there.
	df := deviceFlags{device: cfg.Device, precision: precision}
	if cfg.Device == "cuda" && !launched && cfg.Ranks <= 1 {
		// The training state stays on the GPU in one session; the meter reads
		// the free memory before the session exists.
		s, meter, release, err := df.session(profile)
		if err != nil {
			return nil, err
		}
		defer release()
		cfg.Session, cfg.Memory, cfg.Run, cfg.Adopt, cfg.GPU = s, meter, s.Run, s.Adopt, s.GPU()
		if precision != "fp32" {
			// Where the state cannot stay on the GPU, the host-side optimizer
			// keeps masters, moments and sums fp32 (built only if used).
			opt := exec.NewSession(s.Device(), exec.Options{})
			defer opt.Close()
			cfg.RunOptimizer = opt.Run
		}
		return runner.Local(cfg, timeout)
	}
	// Refused rather than run in f32: the run would not be the bf16 one asked for.
	if cfg.Device == "cpu" && precision != "fp32" {
		return nil, fmt.Errorf("--precision=%s: training on the CPU runs f32; bf16 needs --device=cuda "+
			"(lcc check and lcc run emulate bf16 storage on the CPU)", precision)
	}
	// Opened before any rank starts, and released after the last one returns.
	run, release, err := df.runner()
	if err != nil {
		return nil, err
	}
	defer release()
	if cfg.Device != "cpu" {
		// On the CPU, train runs the interpreter itself (with the rank's
		// communicator when sharded).
		cfg.Run = run
	}
	if precision != "fp32" {
		// Master weights, moments and gradient sums stay fp32.
		opt := deviceFlags{device: cfg.Device, precision: "fp32"}
		runOpt, releaseOpt, err := opt.runner()
		if err != nil {
			return nil, err
		}
		defer releaseOpt()
		cfg.RunOptimizer = runOpt
	}
	// A launched process is one rank of the run; otherwise runner.Local starts every
	// rank (one without --ranks) as goroutines here.
	if launched {
		return runner.Process(cfg, env, timeout)
	}
	return runner.Local(cfg, timeout)
}

// trainSummary prints the run's last line: losses at both ends and throughput.
func trainSummary(cmd *cobra.Command, r *train.Result) error {
	out := cmd.OutOrStdout()
	n := len(r.Losses)
	// A run stopped before its first step, or resumed at its last, has nothing to sum up.
	if n == 0 {
		return nil
	}
	// Means of up to 10 steps at each end: one step's loss is too noisy to show
	// whether the run learned.
	k := min(10, n)
	var first, last float64
	for i := range k {
		first += r.Losses[i] / float64(k)
		last += r.Losses[n-k+i] / float64(k)
	}
	// Each line below appears only where it was measured: a CPU run has no device
	// peak, and only a resident GPU run counts its host traffic.
	if r.MeasuredPeakBytes > 0 {
		fmt.Fprintf(out, "memory  planned peak %s, measured peak %s per GPU (%+.1f%%)\n",
			report.Bytes(r.PlannedPeakBytes), report.Bytes(r.MeasuredPeakBytes),
			100*(float64(r.MeasuredPeakBytes)/float64(max(r.PlannedPeakBytes, 1))-1))
	}
	if r.Resident {
		fmt.Fprintf(out, "host    at most %d bytes per step between host and device (token batch %d bytes)\n",
			r.HostBytes, r.BatchBytes)
	}
	if r.HostHWMBytes > 0 {
		fmt.Fprintf(out, "host    planned peak %s, measured peak resident set %s (%+.1f%%; now %s), pinned %s at most\n",
			report.Bytes(r.PlannedHostPeakBytes), report.Bytes(r.HostHWMBytes),
			100*(float64(r.HostHWMBytes)/float64(max(r.PlannedHostPeakBytes, 1))-1), report.Bytes(r.HostRSSBytes),
			report.Bytes(r.PinnedPeakBytes))
	}
	if r.Resident {
		printStepTime(out, r)
	}
	if r.ProfileSteps > 0 {
		printProfile(out, r)
	}
	if r.Resident {
		printCheckpointTimes(out, r)
	}
	// Rounded to 0.1 s: the wall time of a run is not meaningful to the nanosecond.
	fmt.Fprintf(out, "trained steps %d..%d in %s (%.0f tok/s): mean loss of the first %d steps %.4f, "+
		"of the last %d %.4f\n", r.FirstStep+1, r.Step, r.Wall.Round(100_000_000), r.TokensPerSec,
		k, first, k, last)
	if len(r.Checkpoints) > 0 {
		fmt.Fprintf(out, "checkpoint: %s\n", r.Checkpoints[len(r.Checkpoints)-1])
	}
	return nil
}

// printCheckpointTimes prints, for each checkpoint of a resident run, the
// step's time plus the time the loop spent taking the checkpoint, and the next
// step's (it overlaps the copy) plus what the loop spent on checkpoints after
// it, beside the median of the other steps after the first.
func printCheckpointTimes(out io.Writer, r *train.Result) {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	near := map[int]bool{0: true} // the first step builds the program
	// A checkpoint's step and the next, which overlaps its copy, are what is shown;
	// the others make the baseline.
	for i, c := range r.Checkpointed {
		if c {
			near[i], near[i+1] = true, true
		}
	}
	var others []time.Duration
	for i, d := range r.StepTimes {
		if !near[i] {
			others = append(others, d+r.CheckpointTimes[i])
		}
	}
	// No baseline to compare with, or no checkpoint taken (near holds step 0 alone).
	if len(others) == 0 || len(near) == 1 {
		return
	}
	slices.Sort(others)
	med := others[len(others)/2]
	fmt.Fprintf(out, "checkpoint steps against the median of the %d other steps after the first, %.2f ms:\n",
		len(others), ms(med))
	for i, c := range r.Checkpointed {
		if !c {
			continue
		}
		// StepTimes[i] is step FirstStep+i+1: steps count from 1.
		step, d := r.FirstStep+i+1, r.StepTimes[i]+r.CheckpointTimes[i]
		line := fmt.Sprintf("  step %d: %.2f ms + %.2f ms on the checkpoint (%.2fx)", step,
			ms(r.StepTimes[i]), ms(r.CheckpointTimes[i]), float64(d)/float64(med))
		if i+1 < len(r.StepTimes) {
			d = r.StepTimes[i+1] + r.CheckpointTimes[i+1]
			line += fmt.Sprintf("; step %d, overlapping its copy: %.2f ms (%.2fx)", step+1, ms(d),
				float64(d)/float64(med))
		}
		fmt.Fprintln(out, line)
	}
}

// printStepTime prints the median wall-clock step time after the first two
// steps (the first builds the program, the second captures the CUDA graph), and
// how the step ran: what --cuda-graph=on and off are compared by.
func printStepTime(out io.Writer, r *train.Result) {
	if len(r.StepTimes) < 3 {
		return
	}
	// Sorted on a copy: StepTimes stays in step order for the checkpoint lines.
	ts := slices.Clone(r.StepTimes[2:])
	slices.Sort(ts)
	med := ts[len(ts)/2]
	if len(ts)%2 == 0 {
		med = (ts[len(ts)/2-1] + med) / 2
	}
	// "" when no step reported how it ran (train.Result.CUDAGraph): said as such,
	// not guessed as on or off.
	graph := r.CUDAGraph
	if graph == "" {
		graph = "undecided"
	}
	fmt.Fprintf(out, "step    median %.3f ms over steps %d..%d (cuda graph: %s)\n",
		float64(med)/float64(time.Millisecond), r.FirstStep+3, r.Step, graph)
}

// printProfile prints the mean wall-clock step time and the GPU time per
// kernel family per step of the profiled steps (all but the first).
func printProfile(out io.Writer, r *train.Result) {
	// The profiled steps are the last n: the first builds the program and is not
	// profiled.
	n := r.ProfileSteps
	var wall time.Duration
	for _, d := range r.StepTimes[len(r.StepTimes)-n:] {
		wall += d
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) / float64(n) }
	type fam struct {
		name string
		d    time.Duration
	}
	var fams []fam
	// attn sums every attention kernel family (dense and dilated, forward and
	// backward), so that the wall time left beside it shows what else costs.
	var gpu, attn time.Duration
	for k, d := range r.Profile {
		fams = append(fams, fam{k, d})
		gpu += d
		if strings.HasPrefix(k, "attention") || strings.HasPrefix(k, "dilated") {
			attn += d
		}
	}
	// Slowest first, ties by name: map order must not reorder equal lines run to run.
	sort.Slice(fams, func(i, j int) bool {
		if fams[i].d != fams[j].d {
			return fams[i].d > fams[j].d
		}
		return fams[i].name < fams[j].name
	})
	fmt.Fprintf(out, "profile steps %d..%d: wall %.2f ms/step, GPU kernels %.2f ms/step, attention %.2f ms/step, "+
		"wall minus attention %.2f ms/step\n", r.Step-n+1, r.Step, ms(wall), ms(gpu), ms(attn), ms(wall-attn))
	for _, f := range fams {
		fmt.Fprintf(out, "  %-32s %9.3f ms/step %5.1f%%\n", f.name, ms(f.d), 100*float64(f.d)/float64(max(gpu, 1)))
	}
	if r.Roofline != nil {
		dev, ok := targets.ForGPU(r.GPU)
		// An unknown GPU still gets a roofline, against ceilings the line names.
		if !ok {
			dev, _ = targets.Lookup("h200x1")
			fmt.Fprintf(out, "roofline: no ceilings known for %q; those of %s stand in\n", r.GPU, dev.GPU)
		}
		perf.WriteRoofline(out, perf.Roofline(r.Roofline, r.ProfileSteps, dev, r.TrainedElements), dev)
	}
}
