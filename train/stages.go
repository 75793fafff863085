package train

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/lcc-dev/lcc/train/snapshot"
)

// Stage is one length of progressive training (--seq-len-schedule): Steps
// optimizer steps at SeqLen; Steps 0, the last stage's only, runs on to --steps.
type Stage struct{ SeqLen, Steps int }

// StageResult is what one stage of a --seq-len-schedule run did: its steps
// FirstStep+1 .. Step at SeqLen, in the program of hash Program.
type StageResult struct {
	SeqLen, FirstStep, Step int
	Program                 string
}

// ParseLength reads a sequence length: an integer with an optional K (×1024) or
// M (×1024²) suffix, "64K" being 65536.
func ParseLength(s string) (int, error) {
	mul, num := 1, s
	switch {
	case strings.HasSuffix(s, "K") || strings.HasSuffix(s, "k"):
		mul, num = 1<<10, s[:len(s)-1]
	case strings.HasSuffix(s, "M") || strings.HasSuffix(s, "m"):
		mul, num = 1<<20, s[:len(s)-1]
	}
	n, err := strconv.Atoi(num)
	if err != nil || n < 1 || n*mul < 2 {
		return 0, fmt.Errorf("length %q: want an integer >= 2, optionally with K or M", s)
	}
	return n * mul, nil
}

// ParseSeqLenSchedule reads --seq-len-schedule: comma-separated LEN:STEPS
// stages, STEPS optimizer steps at LEN each, in order; the last stage may leave
// out :STEPS to run on to --steps. "65536:200,262144:400,1048576" trains steps
// 1..200 at 64K, 201..600 at 256K and the rest at 1M.
func ParseSeqLenSchedule(s string) ([]Stage, error) {
	var out []Stage
	parts := strings.Split(s, ",")
	for i, p := range parts {
		lenStr, stepsStr, hasSteps := strings.Cut(strings.TrimSpace(p), ":")
		n, err := ParseLength(lenStr)
		if err != nil {
			return nil, fmt.Errorf("--seq-len-schedule %q: stage %d: %w", s, i+1, err)
		}
		st := Stage{SeqLen: n}
		if hasSteps || i < len(parts)-1 {
			if st.Steps, err = strconv.Atoi(stepsStr); err != nil || st.Steps < 1 {
				return nil, fmt.Errorf("--seq-len-schedule %q: stage %d (%q): want LEN:STEPS with STEPS >= 1 "+
					"(only the last stage may leave out :STEPS)", s, i+1, p)
			}
		}
		out = append(out, st)
	}
	return out, nil
}

// stageEnds is the step each stage of c's schedule ends after, the last
// --steps, or an error naming the flags when they disagree.
func (c *Config) stageEnds() ([]int, error) {
	ends := make([]int, len(c.SeqLenSchedule))
	at := 0
	for i, st := range c.SeqLenSchedule {
		at += st.Steps
		ends[i] = at
	}
	last := c.SeqLenSchedule[len(c.SeqLenSchedule)-1]
	switch {
	case c.SeqLen != 0:
		return nil, fmt.Errorf("--seq-len %d and --seq-len-schedule: give one (the schedule sets each "+
			"stage's length)", c.SeqLen)
	case last.Steps == 0 && at >= c.Steps:
		return nil, fmt.Errorf("--seq-len-schedule: the stages before the last take %d steps, --steps is %d: "+
			"the last stage would have none", at, c.Steps)
	case last.Steps != 0 && c.Steps != 0 && at != c.Steps:
		return nil, fmt.Errorf("--seq-len-schedule: the stages take %d steps, --steps is %d", at, c.Steps)
	}
	ends[len(ends)-1] = max(c.Steps, at)
	return ends, nil
}

// trainStages runs cfg's --seq-len-schedule. Each stage is a run of its own
// length, compiled on its own, with the schedule of all the steps (Steps), up
// to the stage's last step (StopAt); the next stage resumes from the checkpoint
// the previous one took of that step, as `lcc train --resume` at the new
// --seq-len does, so the stages give the losses of those resumed runs. The
// checkpoints go to CheckpointDir, or to a temporary folder removed at the end.
func trainStages(cfg Config) (*Result, error) {
	ends, err := cfg.stageEnds()
	if err != nil {
		return nil, err
	}
	cfg.Steps = ends[len(ends)-1]
	if cfg.StopAt < 0 || cfg.StopAt > cfg.Steps {
		return nil, fmt.Errorf("--stop-at %d: want 0 (off) or 1..--steps (%d)", cfg.StopAt, cfg.Steps)
	}
	temp := cfg.CheckpointDir == ""
	if temp {
		switch {
		case cfg.Resume:
			return nil, fmt.Errorf("--resume needs --checkpoint-dir")
		case cfg.Ranks > 1 || cfg.Comm != nil:
			// Rank 0 alone writes checkpoints; every rank resumes each stage from them.
			return nil, fmt.Errorf("--seq-len-schedule with --ranks=%d needs --checkpoint-dir: every rank "+
				"resumes each stage from rank 0's checkpoint", max(cfg.Ranks, 1))
		}
		tmp, err := os.MkdirTemp("", "lcc-stages-")
		if err != nil {
			return nil, fmt.Errorf("--seq-len-schedule: a folder for the checkpoints between stages: %w", err)
		}
		defer os.RemoveAll(tmp)
		cfg.CheckpointDir = tmp
	}
	total := &Result{}
	tokens, prev := 0.0, 0
	for i, st := range cfg.SeqLenSchedule {
		c := cfg
		c.SeqLenSchedule, c.SeqLen, c.StopAt, c.releaseAfter = nil, st.SeqLen, ends[i], true
		if cfg.StopAt > 0 {
			c.StopAt = min(c.StopAt, cfg.StopAt)
		}
		if i > 0 {
			// The checkpoint of the previous stage's last step, not the newest
			// in the folder (which a run before this one may have left).
			c.Resume, c.resumeStep = true, prev
		}
		fmt.Fprintf(progressOf(c), "stage %d/%d: --seq-len %d, steps %d..%d\n", i+1, len(ends), st.SeqLen,
			prev+1, ends[i])
		r, err := Train(c)
		if err != nil {
			return nil, fmt.Errorf("--seq-len-schedule stage %d (--seq-len %d): %w", i+1, st.SeqLen, err)
		}
		total.merge(r, i == 0)
		total.Stages = append(total.Stages, StageResult{SeqLen: st.SeqLen, FirstStep: r.FirstStep, Step: r.Step,
			Program: r.Program})
		tokens += r.TokensPerSec * r.Wall.Seconds()
		prev = r.Step
		if r.Stopped || r.Step < ends[i] {
			break
		}
	}
	if temp {
		total.Checkpoints = nil // removed with the temporary folder
	}
	if total.Wall > 0 {
		total.TokensPerSec = tokens / total.Wall.Seconds()
	}
	return total, nil
}

// progressOf is where c's progress lines go: rank 0's Progress.
func progressOf(c Config) io.Writer {
	if c.Progress == nil || (c.Comm != nil && c.Comm.Rank() != 0) {
		return io.Discard
	}
	return c.Progress
}

// merge appends stage result r to the whole run's res (first: r is the first
// stage's).
func (res *Result) merge(r *Result, first bool) {
	if first {
		res.FirstStep, res.Resumed = r.FirstStep, r.Resumed
	}
	res.Step, res.Stopped, res.Program = r.Step, r.Stopped, r.Program
	res.Losses = append(res.Losses, r.Losses...)
	res.Checkpoints = append(res.Checkpoints, r.Checkpoints...)
	res.StepTimes = append(res.StepTimes, r.StepTimes...)
	res.CheckpointTimes = append(res.CheckpointTimes, r.CheckpointTimes...)
	res.Checkpointed = append(res.Checkpointed, r.Checkpointed...)
	res.Wall += r.Wall
	res.PlannedPeakBytes = max(res.PlannedPeakBytes, r.PlannedPeakBytes)
	res.MeasuredPeakBytes = max(res.MeasuredPeakBytes, r.MeasuredPeakBytes)
	res.Resident, res.BatchBytes = r.Resident, r.BatchBytes
	res.HostBytes = max(res.HostBytes, r.HostBytes)
	for k, v := range r.Profile {
		if res.Profile == nil {
			res.Profile = map[string]time.Duration{}
		}
		res.Profile[k] += v
	}
	res.ProfileSteps += r.ProfileSteps
}

// resumeFrom is the checkpoint a resume loads: that of step resumeStep when a
// stage set it, else the newest valid one in dir.
func (t *trainer) resumeFrom(dir string) (*snapshot.Checkpoint, []snapshot.Skipped, error) {
	want := t.wantCheckpoint()
	// The checkpoint's weights are decoded into the model's, in place: a
	// resume holds only the masters and moments beside them (cost's
	// ResumeStateBytes). A refused checkpoint may leave some written; the
	// run uses them only once one loads (its every weight), and stops if
	// none does.
	want.Into = t.weights
	if t.cfg.resumeStep > 0 {
		c, err := snapshot.Load(snapshot.Base(dir, t.cfg.resumeStep)+".json", want)
		return c, nil, err
	}
	return snapshot.Latest(dir, want)
}
