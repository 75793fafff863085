package train

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"runtime"
	"strings"
	"time"

	"github.com/lcc-dev/lcc/driver"
	"github.com/lcc-dev/lcc/internal/hostmem"
	"github.com/lcc-dev/lcc/interp"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/passes"
	"github.com/lcc-dev/lcc/passes/autodiff"
	"github.com/lcc-dev/lcc/passes/loss"
	"github.com/lcc-dev/lcc/report"
	"github.com/lcc-dev/lcc/runtime/exec"
	"github.com/lcc-dev/lcc/tensor"
	"github.com/lcc-dev/lcc/train/data"
	"github.com/lcc-dev/lcc/train/optim"
	"github.com/lcc-dev/lcc/train/snapshot"
)

// optimPrefix namespaces optimizer state in checkpoints, away from weight names.
const optimPrefix = snapshot.OptimPrefix

// trainer is a run in progress.
type trainer struct {
	cfg      Config
	rope     *passes.RoPEResult // what rescale-rope rewrote (nil: no RoPE flags)
	grad     *ir.Func           // forward + backward: loss and grad.<w> outputs
	acc      *ir.Func           // gradient accumulation (nil when Accumulate == 1)
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
	// plannedHost is the compile report's host peak of the step.
	plannedHost int64
	// stageSnapshots: the plan holds a device staging copy for checkpoints.
	stageSnapshots bool
	// hostState: the plan keeps AdamW's state in pinned host memory (a
	// resident run then updates it with exec.HostOptimizer); gpuUpdate: on the
	// GPU (its OnDevice).
	hostState, gpuUpdate bool
	plan                 string
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
	if len(cfg.SeqLenSchedule) > 0 {
		return trainStages(cfg)
	}
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
	res, err := t.run()
	if res != nil && cfg.Device == "cuda" {
		res.PlannedHostPeakBytes = t.plannedHost
		measureHost(res)
	}
	if cfg.Session != nil && cfg.releaseAfter {
		// The next stage runs another program: its arena replaces this one's.
		if rerr := cfg.Session.Release(t.grad); err == nil && rerr != nil {
			err = fmt.Errorf("releasing the stage's program: %w", rerr)
		}
	}
	return res, err
}

func newTrainer(cfg Config) (*trainer, error) {
	model, err := loadModel(cfg)
	if err != nil {
		return nil, err
	}
	traceHost(cfg.Log, "loaded")
	var spare, orig *ir.Func
	if cfg.RecompileForDevice {
		spare = model.Clone() // the passes rewrite model; a recompile starts again from this
	}
	if _, compiled := driver.CompiledStep(model); !compiled && cfg.replansForHost() {
		orig = model.Clone() // for a plan under the measured host (the weights' tensors are shared)
	}
	step, err := compileStep(cfg, model, cfg.compileOptions())
	if err != nil {
		return nil, err
	}
	traceHost(cfg.Log, "compiled")
	if step, err = adoptStep(cfg, step, spare); err != nil {
		return nil, err
	}
	traceHost(cfg.Log, "adopted")
	if cfg.Device == "cuda" {
		// Before the optimizer's state, the arena or a pinned buffer exists.
		if lim, ok := hostmem.Read(); ok {
			if step, err = fitMeasuredHost(cfg, step, orig, lim); err != nil {
				return nil, fmt.Errorf("%s: %w", cfg.Model, err)
			}
		}
	}
	grad, lossName, shard, rank := step.Func, step.Loss, step.Rank, 0
	if shard != nil {
		rank = cfg.Comm.Rank()
	}
	o := cfg.adamW()
	upd, err := o.Build(grad)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.Model, err)
	}
	if err := cfg.fitHost(grad, upd.Func); err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.Model, err)
	}
	traceHost(cfg.Log, "optimizer built")
	t := &trainer{cfg: cfg, grad: grad, upd: upd, adamw: o, lossName: lossName,
		hash:    ParamsHash(grad, upd.Func),
		program: step.Hash, plannedPeak: step.Report.Memory.PerGPUPeakBytes, shard: shard, rank: rank,
		plannedHost:    step.Report.Memory.HostPeakBytes,
		stageSnapshots: step.Report.Memory.SnapshotStagingBytes > 0, rope: step.Report.RoPE,
		hostState: step.Report.Memory.OptimizerState == "host",
		gpuUpdate: step.Report.Memory.OptimizerUpdate == "gpu",
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
			t.state[p.Name] = p.Data // nil for a moment that starts at zero (optim.State)
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
		Vocab: vocab, Seed: cfg.Seed, TokenBytes: cfg.TokenBytes, Log: dataLog,
		PackDocs: cfg.DocSep >= 0, DocSep: cfg.DocSep})
	if err != nil {
		return nil, fmt.Errorf("--data: %w", err)
	}
	return t, nil
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

// nextBatch draws the next micro-batch and feeds its tokens (and labels, when the
// step has a label input) into feeds.
func (t *trainer) nextBatch(feeds map[string]*tensor.Tensor) error {
	b, err := t.stream.Next()
	if err != nil {
		return err
	}
	feeds[t.tokens] = b.InputIDs
	if t.labels != "" {
		feeds[t.labels] = b.Labels
	}
	if b.DocStarts != nil {
		feeds[passes.DocStartsInput] = b.DocStarts
	}
	return nil
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
		if err := t.nextBatch(in); err != nil {
			return stepStats{}, err
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
	for k := range t.state {
		uin[k] = t.stateTensor(k)
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

func (t *trainer) run() (*Result, error) {
	cfg := t.cfg
	res := &Result{Program: t.program, PlannedPeakBytes: t.plannedPeak}
	fmt.Fprintf(cfg.Progress, "program %s\n", t.program)
	if t.rope != nil { // --rope-theta, --rope-scaling: the frequencies trained with
		for _, l := range report.RoPELines(*t.rope) {
			fmt.Fprintf(cfg.Progress, "rope    %s\n", l)
		}
	}
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
		t.releaseHost()
		traceHost(cfg.Log, "host copies released")
		res.Resident = true
		res.TrainedElements, res.GPU = t.dev.opt.Elements(), cfg.GPU.Name
		res.BatchBytes = int64(cfg.Accumulate * cfg.Batch * cfg.SeqLen * tensor.I64.Size())
		if t.labels != "" {
			res.BatchBytes *= 2
		}
		if ho, ok := t.dev.opt.(*exec.HostOptimizer); ok && ho.OnDevice() {
			res.OptimizerState = "host (GPU AdamW, streamed)"
			fmt.Fprintf(cfg.Progress, "state   optimizer state: %s: %d trained elements, fp32 masters and "+
				"AdamW moments in pinned host memory; per step they stream up and back through two device "+
				"windows, the GPU updating each beside the gradients and writing the working weights (%s)\n",
				res.OptimizerState, ho.Elements(), ho.CUDAGraph())
		} else if ok {
			res.OptimizerState = fmt.Sprintf("host (CPU AdamW, %d threads)", ho.Threads())
			fmt.Fprintf(cfg.Progress, "state   optimizer state: %s: %d trained elements, fp32 masters and "+
				"AdamW moments in pinned host memory; the working weights and gradients stay on the GPU; per "+
				"step the gradients come down and the working weights go up, the norm runs on the GPU\n",
				res.OptimizerState, ho.Elements())
		} else {
			res.OptimizerState = "device"
			fmt.Fprintf(cfg.Progress, "state   resident on the GPU: %d trained elements, fp32 masters and "+
				"AdamW moments; per step the token batch (%d bytes) and AdamW's 28 bytes of scalars go up, "+
				"the loss and gradient norm come down\n", t.dev.opt.Elements(), res.BatchBytes)
		}
		if cfg.CheckpointDir != "" && t.rank == 0 {
			var err error
			if t.dev.saver, err = t.newSaver(); err != nil {
				return nil, err
			}
			defer t.closeSaver()
			how := "the next update waits for the copy (a staging copy would exceed the memory budget)"
			if t.hostState {
				how = "copied there by the CPU from the host optimizer's state between steps"
			} else if t.dev.saver.stage {
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
		if s < first+3 {
			traceHost(cfg.Log, fmt.Sprintf("step %d", s+1))
		}
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
		if t.dev != nil && res.CUDAGraph == "" {
			// The second step captures the step and the update, or says why not
			// (exec.Bound, exec.Optimizer).
			if g, u := t.dev.bound.CUDAGraph(), t.dev.opt.CUDAGraph(); g != "" && u != "" {
				res.CUDAGraph = g + "; optimizer " + u
				fmt.Fprintf(cfg.Progress, "cuda graph: %s\n", res.CUDAGraph)
			}
		}
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
			if r := cfg.Session.Roofline(); r != nil && s > first {
				if res.Roofline == nil {
					res.Roofline = map[string]exec.Family{}
				}
				for k, v := range r {
					f := res.Roofline[k]
					f.Kind = v.Kind
					f.Time, f.Launches, f.Bytes, f.FLOPs = f.Time+v.Time, f.Launches+v.Launches,
						f.Bytes+v.Bytes, f.FLOPs+v.FLOPs
					res.Roofline[k] = f
				}
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
		line := metric{Step: s + 1, SeqLen: cfg.SeqLen, Loss: finite(st.loss), LR: st.lr, GradNorm: finite(st.gradNorm),
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
	if ho, ok := t.devOpt().(*exec.HostOptimizer); ok {
		res.HostSplit = ho.LastSplit().String()
		fmt.Fprintf(cfg.Progress, "optimizer state: %s; last update: %s\n", res.OptimizerState, res.HostSplit)
	}
	if cfg.Memory != nil {
		cfg.Memory.Poll()
		res.MeasuredPeakBytes = cfg.Memory.Peak()
	}
	res.TokensPerSec = tokensPerStep * float64(res.Step-first) / res.Wall.Seconds()
	return res, nil
}

// devOpt is a resident run's optimizer (nil: none).
func (t *trainer) devOpt() stateOptimizer {
	if t.dev == nil {
		return nil
	}
	return t.dev.opt
}
