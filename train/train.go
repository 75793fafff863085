package train

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	cudagen "github.com/lcc-dev/lcc/codegen/cuda"
	"github.com/lcc-dev/lcc/collective"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/lcc-dev/lcc/driver"
	"github.com/lcc-dev/lcc/internal/fserr"
	"github.com/lcc-dev/lcc/interp"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/passes/autodiff"
	"github.com/lcc-dev/lcc/passes/loss"
	"github.com/lcc-dev/lcc/report"
	"github.com/lcc-dev/lcc/runtime/cuda"
	"github.com/lcc-dev/lcc/runtime/exec"
	"github.com/lcc-dev/lcc/targets"
	"github.com/lcc-dev/lcc/tensor"
	"github.com/lcc-dev/lcc/train/data"
	"github.com/lcc-dev/lcc/train/optim"
	"github.com/lcc-dev/lcc/train/snapshot"
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

	TokenBytes int    // tokens:FILE width, 2 or 4
	Seed       uint64 // seeds the data stream
	Loss       string // --loss: see package passes/loss

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
	// Precision is the device storage (fp32 or bf16); it chooses the kernels.
	Precision string
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
	// Memory, if set, measures the device's peak memory (started before
	// Session was created); it is polled after every step.
	Memory *cuda.PeakMeter
}

// DefaultConfig returns the defaults of `lcc train` (AdamW as PyTorch's
// defaults, clipping at 1, cosine to lr/10, keep 3 checkpoints).
func DefaultConfig() Config {
	t, _ := targets.Lookup(DefaultTarget)
	return Config{Device: "cpu", LR: 1e-3, MinLR: -1, WeightDecay: 0.01, Clip: 1,
		Accumulate: 1, TokenBytes: 2, Loss: loss.Auto, Keep: 3, ProgressEvery: 10, Target: t,
		Checkpoint: "auto", Precision: "fp32"}
}

// DefaultTarget is the target of lcc compile and lcc train without --target.
const DefaultTarget = "h200x1"

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
}

// check validates cfg, naming the flag at fault.
func (c *Config) check() error {
	switch {
	case c.Model == "":
		return errors.New("no model given")
	case c.Device == "cuda" && c.Run == nil:
		return fmt.Errorf("--device=cuda: no GPU executor was given")
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
	case c.WeightDecay < 0 || math.IsNaN(c.WeightDecay):
		return fmt.Errorf("--weight-decay %v: want >= 0", c.WeightDecay)
	case c.Clip < 0 || math.IsNaN(c.Clip):
		return fmt.Errorf("--clip %v: want >= 0 (0 turns clipping off)", c.Clip)
	case c.Accumulate < 1:
		return fmt.Errorf("--accumulate %d: want >= 1", c.Accumulate)
	case c.TokenBytes != 2 && c.TokenBytes != 4:
		return fmt.Errorf("--token-bytes %d: want 2 or 4", c.TokenBytes)
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
	case c.Comm != nil && c.Comm.Size() != max(c.Ranks, 1):
		return fmt.Errorf("--ranks=%d, but the communicator has %d ranks", c.Ranks, c.Comm.Size())
	}
	return nil
}

// ModelHash identifies a model for checkpoints: the SHA-256 of the model as
// loaded (model, its printed IR: graph and bound shapes), the flags that change what
// its step computes (o's loss, attention, precision and sharding), and the
// names, dtypes and shapes of the weights and state of its step grad. Weight
// values are not hashed: they are what training changes. Neither are the
// activation-checkpoint policy, the memory budget and the target: they choose
// which values the step recomputes and where it keeps them, not what it
// computes (a recomputed value is bitwise the original), so a resume may
// change them.
func ModelHash(model string, grad *ir.Func, o driver.Options) string {
	h := sha256.New()
	io.WriteString(h, model)
	a := o.Attention
	fmt.Fprintf(h, "loss %q attention %q %v %v %q precision %q ranks %d %q\n", o.Loss, a.Mode,
		a.Segments, a.Dilations, a.Offsets, o.Precision, max(o.Ranks, 1), o.ShardMode)
	for _, p := range grad.Params {
		if p.Role == ir.RoleWeight || p.Role == ir.RoleState {
			fmt.Fprintf(h, "%s %v\n", p.Name, p.Value.Type)
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// optimPrefix namespaces optimizer state in checkpoints, away from weight names.
const optimPrefix = snapshot.OptimPrefix

// trainer is a run in progress.
type trainer struct {
	cfg      Config
	grad     *ir.Func // forward + backward: loss and grad.<w> outputs
	acc      *ir.Func // gradient accumulation (nil when Accumulate == 1)
	upd      *optim.Update
	sched    optim.Schedule
	lossName string
	tokens   string // the token input's parameter name
	labels   string // the label parameter's name, "" if the model has none
	stream   *data.Stream
	weights  map[string]*tensor.Tensor // every weight the grad function reads
	state    map[string]*tensor.Tensor // optimizer state by update parameter name
	hash     string
	program  string // the program hash (driver.ProgramHash)
	// plannedPeak is the compile report's per-GPU peak of the step; plan its
	// checkpoint policy and pinned host memory, for the progress lines.
	plannedPeak int64
	// stageSnapshots: the plan holds a device staging copy for checkpoints.
	stageSnapshots bool
	plan           string
	// shard is the sharded step of a multi-rank run (nil with one rank), rank
	// this process's rank in it.
	shard *driver.ShardedProgram
	rank  int
	// adamw is the optimizer's configuration; dev the device state of a
	// resident run (nil: the state lives on the host).
	adamw optim.AdamW
	dev   *resident
	// resumedLine is the --metrics line the resumed checkpoint kept (nil: none).
	resumedLine []byte
}

// Train runs cfg on the CPU interpreter in f32 (see package doc).
func Train(cfg Config) (*Result, error) {
	if cfg.MinLR < 0 {
		cfg.MinLR = cfg.LR / 10
	}
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if cfg.Progress == nil || (cfg.Comm != nil && cfg.Comm.Rank() != 0) {
		cfg.Progress = io.Discard
	}
	t, err := newTrainer(cfg)
	if err != nil {
		return nil, err
	}
	defer t.stream.Close()
	return t.run()
}

// compileOptions are the pipeline options of cfg: the same as lcc compile's
// for the same flags.
func (c *Config) compileOptions() driver.CompileOptions {
	o := driver.CompileOptions{Target: c.Target, Model: c.Model, Options: driver.Options{
		Loss: c.Loss, Attention: c.Attention, Checkpoint: c.Checkpoint, MemoryBudget: c.MemoryBudget,
		Precision: c.Precision, Ranks: c.Ranks, ShardMode: c.ShardMode}}
	if c.Comm != nil {
		o.Ranks, o.SPMD, o.Rank = c.Comm.Size(), true, c.Comm.Rank()
	}
	// A resident run's checkpoints take a pinned buffer and maybe a staging
	// copy: the plan's memory holds them.
	o.Snapshots = c.CheckpointDir != "" && c.Session != nil && o.Rank == 0
	return o
}

// Step compiles the training step cfg trains: the model loaded with cfg's
// bindings, through the pipeline lcc compile runs with the same flags
// (driver.CompileStep). Its Hash is the program hash lcc compile reports.
func Step(cfg Config) (*driver.Result, error) {
	model, err := loadModel(cfg)
	if err != nil {
		return nil, err
	}
	return compileStep(cfg, model)
}

// loadModel loads cfg's model with cfg's bindings, printing its warnings and
// the importer's notes to cfg.Log.
func loadModel(cfg Config) (*ir.Func, error) {
	bind := driver.Bindings{SeqLen: int64(cfg.SeqLen), Batch: int64(cfg.Batch), Shape: cfg.Shape}
	model, err := driver.Load(cfg.Model, bind)
	if err != nil {
		return nil, err
	}
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
	if miss := driver.MissingWeights(model); len(miss) > 0 {
		return nil, fmt.Errorf("%s: weights without data: %s", cfg.Model, strings.Join(miss, ", "))
	}
	return model, nil
}

// compileStep is Step of the model loadModel loaded.
func compileStep(cfg Config, model *ir.Func) (*driver.Result, error) {
	res, err := driver.CompileStep(model, cfg.compileOptions())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.Model, err)
	}
	if res.Loss == "" {
		return nil, fmt.Errorf("%s: --loss=%s: nothing to train: the model has no loss output and no "+
			"logits to add cross-entropy to (outputs: %s)", cfg.Model, cfg.Loss, loss.OutputList(res.Func))
	}
	return res, nil
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

func newTrainer(cfg Config) (*trainer, error) {
	model, err := loadModel(cfg)
	if err != nil {
		return nil, err
	}
	// Printed before the passes, which may rewrite model in place.
	loaded := ir.Print(model)
	step, err := compileStep(cfg, model)
	if err != nil {
		return nil, err
	}
	grad, lossName, shard, rank := step.Func, step.Loss, step.Rank, 0
	if cfg.Adopt != nil && step.Program != nil {
		if err := cfg.Adopt(grad, step.Program); err != nil {
			return nil, fmt.Errorf("%s (--target=%s): %w", cfg.Model, cfg.Target.Name, err)
		}
	}
	if shard != nil {
		rank = cfg.Comm.Rank()
	}
	o := optim.DefaultAdamW()
	o.WeightDecay, o.MaxNorm, o.MicroSteps = cfg.WeightDecay, cfg.Clip, cfg.Accumulate
	upd, err := o.Build(grad)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.Model, err)
	}
	if err := cfg.fitHost(grad, upd.Func); err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.Model, err)
	}
	t := &trainer{cfg: cfg, grad: grad, upd: upd, adamw: o, lossName: lossName,
		hash:    ModelHash(loaded, grad, cfg.compileOptions().Options),
		program: step.Hash, plannedPeak: step.Report.Memory.PerGPUPeakBytes, shard: shard, rank: rank,
		stageSnapshots: step.Report.Memory.SnapshotStagingBytes > 0,
		plan: fmt.Sprintf("checkpoint policy %s, %s pinned host memory", step.Report.Checkpoints.Policy,
			report.Bytes(step.Report.Memory.HostBytes)),
		sched:   optim.Schedule{LR: cfg.LR, MinLR: cfg.MinLR, Warmup: cfg.Warmup, Total: cfg.Steps},
		weights: map[string]*tensor.Tensor{}, state: map[string]*tensor.Tensor{}}
	if err := t.sched.Check(); err != nil {
		return nil, err
	}
	if cfg.Accumulate > 1 {
		if t.acc, err = optim.Accumulate(grad); err != nil {
			return nil, err
		}
	}
	if t.cfg.Batch == 0 {
		t.cfg.Batch = modelBatch(grad)
	}
	if err := t.bindData(grad); err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.Model, err)
	}
	for _, p := range grad.Params {
		if p.Role == ir.RoleWeight {
			t.weights[p.Name] = p.Data
		}
	}
	for _, p := range upd.Func.Params {
		if p.Role == ir.RoleState {
			if strings.HasPrefix(p.Name, optimPrefix) || t.weights[optimPrefix+p.Name] != nil {
				return nil, fmt.Errorf("%s: weight names clash with checkpoint names %q", cfg.Model, p.Name)
			}
			t.state[p.Name] = p.Data
		}
	}
	vocab, ok := loss.Vocab(grad)
	if !ok {
		return nil, fmt.Errorf("%s: cannot tell the vocabulary (no embedding gather of a token input "+
			"and no cross-entropy over labels)", cfg.Model)
	}
	dataLog := cfg.Log
	if rank != 0 {
		dataLog = nil // every rank checks the file; one reports
	}
	t.stream, err = data.Open(cfg.Data, data.Options{SeqLen: cfg.SeqLen, Batch: t.cfg.Batch,
		Vocab: vocab, Seed: cfg.Seed, TokenBytes: cfg.TokenBytes, Log: dataLog})
	if err != nil {
		return nil, fmt.Errorf("--data: %w", err)
	}
	return t, nil
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
		switch p.Role {
		case ir.RoleInput:
			slot = &t.tokens
		case ir.RoleLabel:
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

// wantCheckpoint is what a checkpoint of this run must hold.
func (t *trainer) wantCheckpoint() snapshot.Want {
	w := snapshot.Want{ModelHash: t.hash, Tensors: map[string]ir.Type{}}
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
// that changes one cannot match a straight run, and says so.
func (t *trainer) settings() map[string]any {
	c := t.cfg
	return map[string]any{"steps": c.Steps, "lr": c.LR, "min_lr": c.MinLR, "warmup": c.Warmup,
		"weight_decay": c.WeightDecay, "clip": c.Clip, "accumulate": c.Accumulate, "seed": c.Seed,
		"loss": c.Loss, "ranks": max(c.Ranks, 1), "attention": attentionSetting(c)}
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

// agreeOnStep checks that every rank resumed from the same step.
func (t *trainer) agreeOnStep(step int) error {
	if t.shard == nil {
		return nil
	}
	all, err := t.cfg.Comm.AllGather("resume", []int64{1}, []float64{float64(step)})
	if err != nil {
		return fmt.Errorf("--resume: %w", err)
	}
	for r, s := range all {
		if int(s[0]) != step {
			return fmt.Errorf("--resume: rank %d resumed from step %d, rank %d from step %d "+
				"(do the ranks read the same --checkpoint-dir?)", t.rank, step, r, int(s[0]))
		}
	}
	return nil
}

// stopping says whether Config.Stop asks to end the run now; the ranks of a
// sharded run stop when any rank is asked to, all after the same step.
func (t *trainer) stopping() (bool, error) {
	if t.cfg.Stop == nil {
		return false, nil
	}
	asked := 0.0
	select {
	case <-t.cfg.Stop:
		asked = 1
	default:
	}
	if t.shard == nil {
		return asked == 1, nil
	}
	all, err := t.cfg.Comm.AllGather("stop", []int64{1}, []float64{asked})
	if err != nil {
		return false, err
	}
	for _, a := range all {
		if a[0] == 1 {
			return true, nil
		}
	}
	return false, nil
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
	c, skipped, err := snapshot.Latest(dir, t.wantCheckpoint())
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
	for k, v := range now {
		if old, ok := c.Meta.Config[k]; ok && old != v {
			fmt.Fprintf(t.cfg.Progress, "resume: %s changed from %v to %v; the run will not match a "+
				"straight run bit for bit\n", k, old, v)
		}
	}
	res.Resumed, t.resumedLine = c.Path, c.Meta.Metrics
	fmt.Fprintf(t.cfg.Progress, "resume: %s (step %d, loss %.4f)\n", c.Path, c.Meta.Step, c.Meta.Loss)
	return c.Meta.Step, nil
}

// exec runs f on the configured device; optimizer functions may run elsewhere.
func (t *trainer) exec(f *ir.Func, in map[string]*tensor.Tensor) (map[string]*tensor.Tensor, error) {
	if f != t.grad && t.cfg.RunOptimizer != nil {
		return t.cfg.RunOptimizer(f, in)
	}
	if f == t.grad && t.shard != nil {
		in = t.shard.RankFeeds(in, t.rank)
		if t.cfg.Run == nil {
			return interp.Run(f, in, interp.Options{Precision: tensor.F32, Comm: t.cfg.Comm})
		}
	}
	if t.cfg.Run != nil {
		return t.cfg.Run(f, in)
	}
	return interp.Run(f, in, interp.Options{Precision: tensor.F32})
}

// stepStats is what one step reports.
type stepStats struct {
	loss, lr, gradNorm float64
}

// step runs optimizer step s (0-based): Accumulate micro-batches, then AdamW.
func (t *trainer) step(s int) (stepStats, error) {
	if t.dev != nil {
		return t.residentStep(s)
	}
	var (
		sums    map[string]*tensor.Tensor
		lossSum float64
	)
	in := make(map[string]*tensor.Tensor, len(t.weights)+2)
	for k, v := range t.weights {
		in[k] = v
	}
	for range t.cfg.Accumulate {
		b, err := t.stream.Next()
		if err != nil {
			return stepStats{}, err
		}
		in[t.tokens] = b.InputIDs
		if t.labels != "" {
			in[t.labels] = b.Labels
		}
		out, err := t.exec(t.grad, in)
		if err != nil {
			return stepStats{}, err
		}
		lossSum += out[t.lossName].F[0]
		if sums == nil {
			sums = make(map[string]*tensor.Tensor, len(t.upd.Weights))
			for _, w := range t.upd.Weights {
				sums[w] = out[autodiff.GradPrefix+w]
			}
			continue
		}
		ain := make(map[string]*tensor.Tensor, 2*len(sums))
		for _, w := range t.upd.Weights {
			ain[optim.SumPrefix+w] = sums[w]
			ain[autodiff.GradPrefix+w] = out[autodiff.GradPrefix+w]
		}
		aout, err := t.exec(t.acc, ain)
		if err != nil {
			return stepStats{}, err
		}
		for _, w := range t.upd.Weights {
			sums[w] = aout[optim.SumPrefix+w]
		}
	}
	lr := t.sched.At(s)
	uin := make(map[string]*tensor.Tensor, len(t.state)+len(sums)+1)
	for k, v := range t.state {
		uin[k] = v
	}
	for w, g := range sums {
		uin[autodiff.GradPrefix+w] = g
	}
	uin[optim.LRInput] = tensor.Scalar(tensor.F64, lr)
	out, err := t.exec(t.upd.Func, uin)
	if err != nil {
		return stepStats{}, err
	}
	for k := range t.state {
		t.state[k] = out[k]
	}
	for _, w := range t.upd.Weights {
		t.weights[w] = out[w]
	}
	return stepStats{loss: lossSum / float64(t.cfg.Accumulate), lr: lr,
		gradNorm: out[optim.GradNormOutput].F[0]}, nil
}

// save writes a checkpoint of the host state after step and prunes old ones;
// line is the step's --metrics line (see meta).
func (t *trainer) save(step int, loss float64, line []byte) (string, error) {
	ts := make(map[string]*tensor.Tensor, len(t.weights)+len(t.state))
	for k, v := range t.weights {
		ts[k] = v
	}
	for k, v := range t.state {
		ts[optimPrefix+k] = v
	}
	return t.write(step, t.meta(loss, line), ts)
}

// meta is the JSON half of a checkpoint taken now, after a step of loss whose
// --metrics line (its checkpoint's costs aside, not known yet) is line.
func (t *trainer) meta(loss float64, line []byte) snapshot.Meta {
	return snapshot.Meta{Data: t.stream.State(), LCCVersion: t.cfg.Version, ModelHash: t.hash,
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

// metric is one line of the --metrics file.
type metric struct {
	Step       int     `json:"step"`
	Loss       any     `json:"loss"` // a number, or null if not finite
	LR         float64 `json:"lr"`
	GradNorm   any     `json:"grad_norm"`
	TokensPerS float64 `json:"tokens_per_s"`
	// PlannedPeak is the compile report's per-GPU peak of the step (the same
	// every step), beside which a measured peak is read.
	PlannedPeak int64 `json:"planned_peak_bytes"`
	// MeasuredPeak is the device's measured peak so far (Config.Memory), and
	// HostBytes the bytes this step moved between host and device (resident
	// GPU runs); both omitted when not measured.
	MeasuredPeak int64 `json:"measured_peak_bytes,omitempty"`
	HostBytes    int64 `json:"host_bytes,omitempty"`
	// StepMS is the step's wall-clock time, CheckpointMS the further time the
	// loop then spent on checkpoints (taking one: waiting for the previous
	// write and queueing the copies, or, on the host, all of it; freeing the
	// staging copy of one whose copy is done). A checkpoint step has
	// Checkpoint set, CheckpointWriteMS (within CheckpointMS) the time spent
	// waiting for the previous checkpoint's files, and CheckpointBytes, the
	// bytes its copies move from device to host: they are not in HostBytes,
	// and the next steps overlap them.
	StepMS            float64 `json:"step_ms"`
	Checkpoint        bool    `json:"checkpoint,omitempty"`
	CheckpointMS      float64 `json:"checkpoint_ms,omitempty"`
	CheckpointWriteMS float64 `json:"checkpoint_write_wait_ms,omitempty"`
	CheckpointBytes   int64   `json:"checkpoint_bytes,omitempty"`
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func (t *trainer) run() (*Result, error) {
	cfg := t.cfg
	res := &Result{Program: t.program, PlannedPeakBytes: t.plannedPeak}
	fmt.Fprintf(cfg.Progress, "program %s\n", t.program)
	if cfg.Device == "cpu" {
		// The plan is the target's; this run's memory is the host's.
		fmt.Fprintf(cfg.Progress, "memory  on the CPU (interpreter, f32): the step lines show the host heap; "+
			"the plan for %s is %s per GPU (%s)\n", cfg.Target.Name, report.Bytes(t.plannedPeak), t.plan)
	} else {
		fmt.Fprintf(cfg.Progress, "memory  planned peak %s per GPU (the compile report's; %s)\n",
			report.Bytes(t.plannedPeak), t.plan)
	}
	first := 0
	if cfg.Resume {
		var err error
		if first, err = t.resume(res); err != nil {
			return nil, err
		}
		if err := t.agreeOnStep(first); err != nil {
			return nil, err
		}
	}
	res.FirstStep, res.Step = first, first
	last := cfg.Steps
	if cfg.StopAt > 0 {
		last = cfg.StopAt
	}
	if first >= last {
		fmt.Fprintf(cfg.Progress, "nothing to do: step %d reached (--steps %d, --stop-at %d)\n", first,
			cfg.Steps, cfg.StopAt)
		return res, nil
	}
	if why := t.residentReason(); why == "" {
		if err := t.setupResident(); err != nil {
			return nil, fmt.Errorf("keeping the training state on the GPU: %w", err)
		}
		defer t.dev.opt.Close()
		res.Resident = true
		res.BatchBytes = int64(cfg.Accumulate * cfg.Batch * cfg.SeqLen * tensor.I64.Size())
		if t.labels != "" {
			res.BatchBytes *= 2
		}
		fmt.Fprintf(cfg.Progress, "state   resident on the GPU: %d trained elements, fp32 masters and "+
			"AdamW moments; per step the token batch (%d bytes) goes up, the loss and gradient norm "+
			"come down\n", t.dev.opt.Elements(), res.BatchBytes)
		if cfg.CheckpointDir != "" && t.rank == 0 {
			var err error
			if t.dev.saver, err = t.newSaver(); err != nil {
				return nil, err
			}
			defer t.closeSaver()
			how := "the next update waits for the copy (a staging copy would exceed the memory budget)"
			if t.dev.saver.stage {
				how = "through a staging copy on the device (in the planned peak), freed once copied"
			}
			fmt.Fprintf(cfg.Progress, "checkpoints copied in the background on a copy stream into %s of "+
				"pinned host memory, %s, and written by a goroutine\n",
				report.Bytes(int64(t.dev.opt.SnapshotBytes())), how)
		}
	} else if cfg.Session != nil {
		fmt.Fprintf(cfg.Progress, "state   on the host (%s)\n", why)
	}
	var metrics *metricsLog
	if cfg.Metrics != "" && t.rank == 0 {
		var err error
		if metrics, err = openMetrics(cfg.Metrics, first, t.resumedLine, cfg.Log); err != nil {
			return nil, fmt.Errorf("--metrics: %w", err)
		}
		defer metrics.close()
	}
	tokensPerStep := float64(cfg.Batch * cfg.SeqLen * cfg.Accumulate)
	start := time.Now()
	window, windowSteps := start, 0
	for s := first; s < last; s++ {
		var h0, d0, stepBytes int64
		if t.dev != nil {
			h0, d0 = cfg.Session.Device().Transferred()
		}
		t0 := time.Now()
		st, err := t.step(s)
		if err != nil {
			return nil, fmt.Errorf("step %d: %w", s+1, err)
		}
		dt := time.Since(t0)
		if t.dev != nil {
			h1, d1 := cfg.Session.Device().Transferred()
			stepBytes = h1 - h0 + d1 - d0
			res.HostBytes = max(res.HostBytes, stepBytes)
		}
		if cfg.Memory != nil {
			cfg.Memory.Poll()
			res.MeasuredPeakBytes = cfg.Memory.Peak()
		}
		res.StepTimes = append(res.StepTimes, dt)
		var ck checkpointStats
		if t.dev != nil {
			p0 := time.Now()
			did, err := t.pollSave(res)
			if err != nil {
				return res, fmt.Errorf("after step %d: %w", s+1, err)
			}
			if did {
				ck.wait = time.Since(p0)
			}
		}
		if cfg.Session != nil {
			if p := cfg.Session.Profile(); p != nil && s > first {
				if res.Profile == nil {
					res.Profile = map[string]time.Duration{}
				}
				for k, v := range p {
					res.Profile[k] += v
				}
				res.ProfileSteps++
			}
		}
		res.Losses = append(res.Losses, st.loss)
		res.Step = s + 1
		windowSteps++
		bad := math.IsNaN(st.loss) || math.IsInf(st.loss, 0)
		stopping, err := t.stopping()
		if err != nil {
			return res, fmt.Errorf("after step %d: %w", res.Step, err)
		}
		checkpointed := !bad && cfg.CheckpointDir != "" && t.rank == 0 &&
			((cfg.CheckpointEvery > 0 && res.Step%cfg.CheckpointEvery == 0) || res.Step == last || stopping)
		line := metric{Step: s + 1, Loss: finite(st.loss), LR: st.lr, GradNorm: finite(st.gradNorm),
			TokensPerS: tokensPerStep / dt.Seconds(), StepMS: ms(dt), PlannedPeak: t.plannedPeak,
			MeasuredPeak: res.MeasuredPeakBytes, HostBytes: stepBytes, Checkpoint: checkpointed}
		if checkpointed {
			// The checkpoint keeps the step's line, for a resume to restore it if
			// the run dies before writing it (the line follows the commit: it
			// holds the checkpoint's costs).
			var kept []byte
			if metrics != nil {
				kept, _ = json.Marshal(line)
			}
			took, err := t.checkpoint(res, res.Step, st.loss, kept)
			if afterCheckpoint != nil {
				afterCheckpoint(res.Step)
			}
			if err != nil {
				return res, fmt.Errorf("step %d: %w", res.Step, err)
			}
			ck.wait, ck.write, ck.bytes = ck.wait+took.wait, took.write, took.bytes
		}
		res.CheckpointTimes = append(res.CheckpointTimes, ck.wait)
		res.Checkpointed = append(res.Checkpointed, checkpointed)
		line.CheckpointMS, line.CheckpointWriteMS, line.CheckpointBytes = ms(ck.wait), ms(ck.write), ck.bytes
		metrics.write(line)
		if bad {
			return res, fmt.Errorf("step %d: loss is %v (try a lower --lr or --clip)", s+1, st.loss)
		}
		if cfg.ProgressEvery > 0 && (res.Step%cfg.ProgressEvery == 0 || res.Step == last) {
			el := time.Since(window)
			avg := time.Since(start) / time.Duration(res.Step-first)
			mem := "gpu " + report.Bytes(res.MeasuredPeakBytes) + " peak"
			if cfg.Memory == nil {
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				mem = fmt.Sprintf("host heap %d MiB", ms.HeapAlloc>>20)
			}
			fmt.Fprintf(cfg.Progress, "step %d/%d  loss %.4f  lr %.3g  grad_norm %.3f  %.0f tok/s  "+
				"mem %s  ETA %s\n", res.Step, cfg.Steps, st.loss, st.lr, st.gradNorm,
				tokensPerStep*float64(windowSteps)/el.Seconds(), mem,
				(avg * time.Duration(last-res.Step)).Round(time.Second))
			window, windowSteps = time.Now(), 0
		}
		if stopping && res.Step < last {
			res.Stopped = true
			break
		}
	}
	if t.dev != nil {
		// The last checkpoint's write is part of the run.
		if err := t.finishSave(res); err != nil {
			return res, fmt.Errorf("step %d: %w", res.Step, err)
		}
	}
	res.Wall = time.Since(start)
	if cfg.Memory != nil {
		cfg.Memory.Poll()
		res.MeasuredPeakBytes = cfg.Memory.Peak()
	}
	res.TokensPerSec = tokensPerStep * float64(res.Step-first) / res.Wall.Seconds()
	return res, nil
}

// finite returns v, or nil (JSON null) for NaN and ±Inf, which JSON cannot hold.
func finite(v float64) any {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return v
}
