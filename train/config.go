package train

import (
	"errors"
	"fmt"
	"io"
	"math"
	"time"

	cudagen "github.com/lcc-dev/lcc/codegen/cuda"
	"github.com/lcc-dev/lcc/collective"
	"github.com/lcc-dev/lcc/train/optim"
	"github.com/lcc-dev/lcc/train/snapshot"

	"github.com/lcc-dev/lcc/driver"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/passes"
	"github.com/lcc-dev/lcc/passes/loss"
	"github.com/lcc-dev/lcc/runtime/cuda"
	"github.com/lcc-dev/lcc/runtime/exec"
	"github.com/lcc-dev/lcc/targets"
	"github.com/lcc-dev/lcc/tensor"
)

// Config is one training run; the fields mirror `lcc train`'s flags.
type Config struct {
	Model  string // .onnx or .lcc file
	Device string // "cpu", or "cuda" with Run set
	// Run executes the forward+backward on the device (the CLI supplies the CUDA
	// executor); nil runs the CPU reference interpreter in f32.
	Run func(f *ir.Func, in map[string]*tensor.Tensor) (map[string]*tensor.Tensor, error)
	// RunOptimizer executes gradient accumulation and the AdamW update; nil means
	// Run. Mixed precision runs the step in bf16 and the optimizer in fp32, so
	// master weights, moments and accumulated gradients stay fp32.
	RunOptimizer func(f *ir.Func, in map[string]*tensor.Tensor) (map[string]*tensor.Tensor, error)
	Data         string // data spec: see package data

	// SeqLen binds the model's seq dim; Batch its batch dim, 0 meaning the model's
	// static batch if it has one, else 1. Shape binds other named dims (--shape).
	SeqLen, Batch int
	Shape         map[string]int64
	// SeqLenSchedule, if set (--seq-len-schedule, SeqLen then 0), trains its
	// stages in order, each at its length in a program compiled for it, under
	// one learning-rate schedule over all Steps (0: the stages' sum).
	SeqLenSchedule []Stage
	// resumeStep, if > 0, makes Resume load the checkpoint of that step (a
	// stage of SeqLenSchedule resumes where the previous one ended).
	resumeStep int
	// releaseAfter frees the step's GPU program once the run ends (a stage).
	releaseAfter bool
	// Steps is the number of optimizer steps the run (and its schedule) spans.
	Steps int
	// StopAt, if > 0, stops after that step, checkpointing there, with the
	// schedule still spanning Steps: the way to split one run into pieces.
	StopAt int

	LR float64
	// MinLR is the cosine's floor; negative means LR/10.
	MinLR  float64
	Warmup int
	// WeightDecay, Clip (max global grad norm, 0 = off) and Accumulate
	// (micro-batches per step) configure the optimizer.
	WeightDecay float64
	Clip        float64
	Accumulate  int

	TokenBytes int // tokens:FILE width, 2 or 4
	// DocSep, when >= 0, packs whole documents split after this token id into each
	// sequence (--doc-sep; see package data), masking attention to each document.
	DocSep int64
	Seed   uint64 // seeds the data stream
	Loss   string // --loss: see package passes/loss

	// Metrics, if set, gets one JSON line per step (appended to when resuming).
	Metrics string
	// CheckpointDir, if set, gets a checkpoint every CheckpointEvery steps (and
	// at the last step), keeping the newest Keep.
	CheckpointDir   string
	CheckpointEvery int
	Keep            int
	// Resume continues from the newest valid checkpoint in CheckpointDir.
	Resume bool
	// Stop, once closed, ends the run after the step in flight, with a
	// checkpoint of it when CheckpointDir is set (lcc train closes it on SIGINT
	// or SIGTERM). The ranks of a sharded run agree on the step to stop after.
	Stop <-chan struct{}

	// Progress gets a progress line every ProgressEvery steps (nil: none).
	Progress io.Writer
	// Log gets the model's warnings and the importer's notes, as compile and
	// check print them (nil: none).
	Log           io.Writer
	ProgressEvery int
	// Version is lcc's version, recorded in checkpoints.
	Version string

	// Target, Loss (above), Attention, Checkpoint, MemoryBudget, Precision, Ranks
	// and ShardMode choose the passes of the step exactly as lcc compile's flags
	// of the same names do (driver.Options): the step trained is the program
	// lcc compile reports, with the same hash.
	Target targets.Target
	// Attention selects the attention rewrites (--attention, --segments,
	// --dilations, --dilated-offsets); the zero value is dense attention.
	Attention driver.AttentionOptions
	// Checkpoint is the activation checkpointing policy; MemoryBudget overrides
	// the budget derived from Target.
	Checkpoint   string
	MemoryBudget int64
	// HostBudget bounds the host memory of a step on the CPU interpreter (Run nil);
	// the zero value checks nothing.
	HostBudget driver.HostBudget
	// HostMemoryBudget bounds a GPU step's planned host peak, as lcc compile's
	// --host-memory-budget does (driver.Options.HostMemoryBudget; 0: no bound).
	HostMemoryBudget int64
	// Precision is the device storage (fp32 or bf16); it chooses the kernels.
	Precision string
	// RoPE is --rope-theta and --rope-scaling (rescale-rope; the zero value keeps
	// the model's rotary embeddings).
	RoPE passes.RoPEConfig
	// CUDAGraph is driver.Options.CUDAGraph: "off" runs a GPU step's launches
	// one by one instead of replaying them as a CUDA graph.
	CUDAGraph string
	// Fuse is driver.Options.Fuse (--fuse): "on" fuses groups of elementwise
	// ops into one kernel each; "off" or "" does not.
	Fuse string
	// OptimizerState is driver.Options.OptimizerState (--optimizer-state):
	// where a resident run keeps AdamW's masters and moments, device (also
	// ""), host (pinned host memory, exec.HostOptimizer) or auto (the plan
	// decides). Gradient accumulation keeps them on the device: auto then
	// plans device, and host is refused.
	OptimizerState string
	// OptimizerUpdate is driver.Options.OptimizerUpdate (--optimizer-update):
	// where a host state's AdamW update runs, gpu (also "": the state
	// streamed through device windows) or cpu.
	OptimizerUpdate string
	// Ranks > 1 shards every step's sequence over that many ranks with ShardMode
	// (ring, ulysses or dilated: see driver.ShardModes); Comm is this rank's
	// communicator (with Ranks ≤ 1, a Comm of one rank runs the step sharded for
	// one rank, collectives included: how a one-rank NCCL communicator is
	// tested). Each rank runs the rank-specific build of the step on its
	// share of the batch and ends the step with the all-reduced gradient, so
	// weights and optimizer state are the same on every rank. Rank 0 alone writes
	// checkpoints, metrics and progress; every rank resumes from its checkpoints.
	// Package train/runner starts the ranks. With Run set (the GPU), Run gets the
	// rank's share of the batch and must run the step's collectives on Comm's
	// ranks (an exec.Session whose Options.Comm is Comm).
	Ranks     int
	ShardMode string
	Comm      collective.Communicator

	// Session, if set (--device=cuda), keeps the training state on its GPU
	// across steps: working weights and gradients in the step's arena, fp32
	// masters and AdamW moments beside them, updated by fused kernels; a step
	// moves only its token batch up and its loss and gradient norm down. Run
	// and RunOptimizer are then used only where the state cannot stay (a
	// sharded step).
	Session *exec.Session
	// Adopt, if set, hands the compiled step's GPU program to the executor that
	// Run or Session runs it on (exec.Session.Adopt): the kernels, launch plan
	// and arena that run are those the printed program hash names, compiled for
	// --target's architecture, never generated again for the GPU found.
	Adopt func(*ir.Func, *cudagen.Program) error
	// GPU is the device Adopt's executor runs on (exec.Session.GPU); the zero
	// value leaves the arch check to Adopt alone.
	GPU exec.GPU
	// RecompileForDevice (--recompile-for-device) compiles the step again for
	// GPU's arch when --target's differs, printing the new program hash;
	// without it a program GPU cannot run is refused, naming the flag.
	RecompileForDevice bool
	// Memory, if set, measures the device's peak memory (started before
	// Session was created); it is polled after every step.
	Memory *cuda.PeakMeter
}

// DefaultTarget is the target of lcc compile and lcc train without --target.
const DefaultTarget = "h200x1"

// DefaultConfig returns the defaults of `lcc train` (AdamW as PyTorch's
// defaults, clipping at 1, cosine to lr/10, keep 3 checkpoints).
func DefaultConfig() Config {
	t, _ := targets.Lookup(DefaultTarget)
	return Config{Device: "cpu", LR: 1e-3, MinLR: -1, WeightDecay: 0.01, Clip: 1,
		Accumulate: 1, TokenBytes: 2, Loss: loss.Auto, Keep: 3, ProgressEvery: 10, Target: t,
		Checkpoint: "auto", Precision: "fp32", DocSep: -1, OptimizerState: "auto"}
}

// Result summarises a run.
type Result struct {
	// FirstStep is the step the run started from (the checkpoint's step when
	// resuming, else 0); Step is the last step done.
	FirstStep, Step int
	// Losses holds the loss of steps FirstStep+1 .. Step.
	Losses []float64
	// Resumed is the checkpoint the run resumed from, if any.
	Resumed string
	// Stopped says that Config.Stop ended the run after Step, before its last.
	Stopped bool
	// Checkpoints lists the checkpoints written, oldest first.
	Checkpoints []string
	Wall        time.Duration
	// TokensPerSec is the mean training throughput over the run.
	TokensPerSec float64
	// Program is the program hash of the step (driver.ProgramHash).
	Program string
	// PlannedPeakBytes is the compile report's per-GPU peak of the step.
	PlannedPeakBytes int64
	// MeasuredPeakBytes is Config.Memory's peak at the end (0 without one).
	MeasuredPeakBytes int64
	// PlannedHostPeakBytes is the compile report's host peak of a GPU run;
	// HostRSSBytes and HostHWMBytes the process's resident set at the end and
	// at its peak (VmRSS, VmHWM), PinnedPeakBytes the most pinned host memory
	// it held (runtime/cuda's count); all 0 for a CPU run.
	PlannedHostPeakBytes, HostRSSBytes, HostHWMBytes, PinnedPeakBytes int64
	// Resident says whether the training state stayed on the device; HostBytes
	// is then the most bytes one step moved between host and device
	// (checkpoints' copies, queued between steps, excepted), BatchBytes the
	// bytes of one step's token batch.
	Resident              bool
	HostBytes, BatchBytes int64
	// StepTimes is the wall-clock time of each step of this run, and
	// CheckpointTimes the time the loop then spent on checkpoints (metric's
	// CheckpointMS); Checkpointed says which steps took one.
	StepTimes, CheckpointTimes []time.Duration
	Checkpointed               []bool
	// Profile is the GPU time per kernel family summed over ProfileSteps steps
	// (every step but the first, which builds the program), when the session
	// profiles (exec.Options.Profile).
	Profile      map[string]time.Duration
	ProfileSteps int
	// Roofline is what each kernel family did over the ProfileSteps steps
	// (exec.Session.Roofline): time, launches, bytes and FLOPs.
	Roofline map[string]exec.Family
	// GPU is the device the step ran on (Config.GPU.Name; "" on the CPU).
	GPU string
	// OptimizerState says where a resident run kept AdamW's state: "device",
	// or "host (CPU AdamW, N threads)" ("" when not resident).
	OptimizerState string
	// HostSplit is where the last step of a host optimizer spent its update
	// (exec.HostSplit), "" otherwise.
	HostSplit string
	// TrainedElements is the number of trained weight elements of a resident
	// run (the optimizer's passes are per element).
	TrainedElements int64
	// CUDAGraph says how a resident step ran: "captured N launches (M graph
	// nodes)" or "not captured: why", then "; optimizer " and the same of the
	// update ("" on the CPU or before a second step).
	CUDAGraph string
	// Stages are the stages of a --seq-len-schedule run, in order (nil
	// without one; Program is then the last stage's).
	Stages []StageResult
}

// check validates cfg, naming the flag at fault.
func (c *Config) check() error {
	switch {
	case c.Model == "":
		return errors.New("no model given")
	case c.Device == "cuda" && c.Run == nil:
		return fmt.Errorf("--device=cuda: no GPU executor was given")
	case c.RecompileForDevice && c.Device != "cuda":
		return fmt.Errorf("%s compiles the step for the GPU found: it needs --device=cuda", RecompileFlag)
	case c.Device != "cpu" && c.Device != "cuda":
		return fmt.Errorf("--device %q: want cpu or cuda", c.Device)
	case c.Data == "":
		return errors.New("--data: required (synthetic:copy, synthetic:passkey, tokens:FILE, bytes:FILE)")
	case c.SeqLen == 0:
		return errors.New("--seq-len: required (tokens per sequence: it binds the model's seq dim)")
	case c.SeqLen < 2:
		return fmt.Errorf("--seq-len %d: want >= 2", c.SeqLen)
	case c.Batch < 0:
		return fmt.Errorf("--batch %d: want >= 1", c.Batch)
	case c.Steps == 0:
		return errors.New("--steps: required (optimizer steps; the learning-rate schedule spans them)")
	case c.Steps < 1:
		return fmt.Errorf("--steps %d: want >= 1", c.Steps)
	case c.StopAt < 0 || c.StopAt > c.Steps:
		return fmt.Errorf("--stop-at %d: want 0 (off) or 1..--steps (%d)", c.StopAt, c.Steps)
	case !(c.LR > 0) || math.IsInf(c.LR, 0):
		return fmt.Errorf("--lr %v: want a positive number", c.LR)
	case c.MinLR > c.LR:
		return fmt.Errorf("--min-lr %v: want <= --lr (%v)", c.MinLR, c.LR)
	case c.Warmup < 0:
		return fmt.Errorf("--warmup %d: want >= 0", c.Warmup)
	case c.Warmup > c.Steps:
		return fmt.Errorf("--warmup %d: want <= --steps (%d): the warmup would never end", c.Warmup, c.Steps)
	case c.Accumulate < 1:
		return fmt.Errorf("--accumulate %d: want >= 1", c.Accumulate)
	case c.TokenBytes != 2 && c.TokenBytes != 4:
		return fmt.Errorf("--token-bytes %d: want 2 or 4", c.TokenBytes)
	case c.DocSep < -1:
		return fmt.Errorf("--doc-sep %d: want a token id (or -1: no packing)", c.DocSep)
	case c.CheckpointEvery < 0:
		return fmt.Errorf("--checkpoint-every %d: want >= 0", c.CheckpointEvery)
	case c.CheckpointEvery > 0 && c.CheckpointDir == "":
		return errors.New("--checkpoint-every needs --checkpoint-dir")
	case c.Resume && c.CheckpointDir == "":
		return errors.New("--resume needs --checkpoint-dir")
	case c.Keep < 0:
		return fmt.Errorf("--keep %d: want >= 0 (0 keeps all)", c.Keep)
	case c.ProgressEvery < 0:
		return fmt.Errorf("progress interval %d: want >= 0", c.ProgressEvery)
	case c.Ranks < 0:
		return fmt.Errorf("--ranks %d: want >= 1", c.Ranks)
	case c.Ranks > 1 && c.Comm == nil:
		return fmt.Errorf("--ranks=%d: no communicator (train/runner starts the ranks)", c.Ranks)
	case c.OptimizerState == "host" && c.Accumulate > 1:
		return fmt.Errorf("--optimizer-state=host with --accumulate %d: the host optimizer runs one "+
			"micro-step a step (use --optimizer-state=device or auto)", c.Accumulate)
	case c.Comm != nil && c.Comm.Size() != max(c.Ranks, 1):
		return fmt.Errorf("--ranks=%d, but the communicator has %d ranks", c.Ranks, c.Comm.Size())
	}
	// The optimizer's own rules, under the names of the flags that set them.
	var pe *optim.ParamError
	if err := c.adamW().Check(); errors.As(err, &pe) {
		return fmt.Errorf("%s %v: want %s", adamWFlags[pe.Param], pe.Value, pe.Want)
	}
	return nil
}

// adamWFlags names the lcc train flag of each AdamW parameter it sets.
var adamWFlags = map[string]string{"weight decay": "--weight-decay", "max norm": "--clip",
	"micro-steps": "--accumulate"}

// adamW is the optimizer c configures: PyTorch's AdamW with c's weight decay,
// clipping and accumulation.
func (c *Config) adamW() optim.AdamW {
	o := optim.DefaultAdamW()
	o.WeightDecay, o.MaxNorm, o.MicroSteps = c.WeightDecay, c.Clip, c.Accumulate
	return o
}

// compileOptions are the pipeline options of cfg: the same as lcc compile's
// for the same flags.
func (c *Config) compileOptions() driver.CompileOptions {
	o := driver.CompileOptions{Target: c.Target, Model: c.Model, Options: driver.Options{
		Loss: c.Loss, Attention: c.Attention, Checkpoint: c.Checkpoint, MemoryBudget: c.MemoryBudget,
		Precision: c.Precision, Ranks: c.Ranks, ShardMode: c.ShardMode, RoPE: c.RoPE, PackDocs: c.DocSep >= 0,
		HostMemoryBudget: c.HostMemoryBudget, CUDAGraph: c.CUDAGraph, OptimizerState: c.OptimizerState,
		OptimizerUpdate: c.OptimizerUpdate, Fuse: c.Fuse}}
	if c.Accumulate > 1 && c.OptimizerState == "auto" {
		o.OptimizerState = "device" // the host optimizer does not accumulate
	}
	if c.Comm != nil {
		o.Ranks, o.SPMD, o.Rank = c.Comm.Size(), true, c.Comm.Rank()
	}
	// A resident run's checkpoints take a pinned buffer and maybe a staging
	// copy: the plan's memory holds them.
	o.Snapshots = c.CheckpointDir != "" && c.Session != nil && o.Rank == 0
	// A resume holds its checkpoint's optimizer state beside the model while
	// it loads: the host plan holds it too.
	o.Resume = c.resumes()
	return o
}

// resumes says whether the run loads a checkpoint: --resume with one in
// --checkpoint-dir (an empty folder starts from step 0, loading nothing), or
// a stage resuming where the previous one ended. A folder that cannot be
// listed counts as holding one: the resume then says what is wrong with it.
func (c *Config) resumes() bool {
	if !c.Resume {
		return false
	}
	if c.resumeStep > 0 {
		return true
	}
	paths, err := snapshot.List(c.CheckpointDir)
	return err != nil || len(paths) > 0
}

// attentionSetting describes the attention flags for checkpoints.
func attentionSetting(c Config) string {
	a := c.Attention
	s := a.Mode
	if s == "" {
		s = "as-exported"
	}
	if c.Ranks > 1 {
		s += "/" + c.ShardMode
	}
	if a.Mode == "dilated" {
		s += fmt.Sprintf(" segments=%v dilations=%v offsets=%s", a.Segments, a.Dilations, a.Offsets)
	}
	return s
}

// fitHost refuses a run on the CPU interpreter whose step or update would pass
// the host budget: the step holds the optimizer's state beside its own values.
func (c *Config) fitHost(grad, upd *ir.Func) error {
	if c.Run != nil {
		return nil
	}
	var state int64
	for _, p := range upd.Params {
		if p.Role == ir.RoleState {
			state += int64(tensor.HostElemBytes) * p.Value.Type.Numel()
		}
	}
	if err := c.HostBudget.Fit(grad, state); err != nil {
		return err
	}
	return c.HostBudget.Fit(upd, 0)
}
