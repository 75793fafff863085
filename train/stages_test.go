package train

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lcc-dev/lcc/runtime/cuda/devicetest"
	"github.com/lcc-dev/lcc/tensor"
)

// progressive is llama_mini on testdata/trajectory/tokens.bin, 20 steps of 2
// sequences with warmup: the recipe of scripts/torch_trajectory.py --progressive.
func progressive(t *testing.T) Config {
	c := DefaultConfig()
	c.Model, c.Data = "../testdata/onnx/llama_mini.onnx", "tokens:../testdata/trajectory/tokens.bin"
	c.Batch, c.Steps, c.LR, c.MinLR, c.Warmup = 2, 20, 1e-3, 1e-4, 5
	c.Version = "test"
	return c
}

// TestProgressiveResume trains llama_mini 10 steps at seq 32 (--steps 20
// --stop-at 10), resumes at seq 64 for the other 10, and checks that the resume
// takes the same parameters into the new length's program (a new hash, said
// so), that the metrics record each step's length, and that --seq-len-schedule
// 32:10,64 gives the same losses bit for bit.
func TestProgressiveResume(t *testing.T) {
	dir := t.TempDir()
	metrics := filepath.Join(dir, "m.jsonl")
	first := progressive(t)
	first.SeqLen, first.StopAt, first.CheckpointDir, first.Metrics = 32, 10, dir, metrics
	a := run(t, first)
	second := progressive(t)
	second.SeqLen, second.Resume, second.CheckpointDir, second.Metrics = 64, true, dir, metrics
	var log strings.Builder
	second.Progress = &log
	b := run(t, second)
	if b.FirstStep != 10 || b.Step != 20 || b.Program == a.Program {
		t.Fatalf("resumed at 64: steps %d..%d, program %s (the first half's %s)", b.FirstStep, b.Step,
			b.Program, a.Program)
	}
	if !strings.Contains(log.String(), "resume: --seq-len 32 -> 64: the same parameters and AdamW state "+
		"(step 10) go on in the new length's program "+b.Program) || strings.Contains(log.String(), "changed") {
		t.Errorf("the resume does not say it goes on at the new length (or reports a change):\n%s", log.String())
	}
	lines := readMetrics(t, metrics)
	if len(lines) != 20 {
		t.Fatalf("%d metrics lines, want 20", len(lines))
	}
	for i, m := range lines {
		want := 32
		if i >= 10 {
			want = 64
		}
		if m.Keys["seq_len"] != float64(want) {
			t.Errorf("metrics line %d: seq_len %v, want %d", i+1, m.Keys["seq_len"], want)
		}
	}
	resumed := append(append([]float64{}, a.Losses...), b.Losses...)

	sched := progressive(t)
	sched.SeqLenSchedule = []Stage{{32, 10}, {64, 0}}
	log.Reset()
	sched.Progress = &log
	s := run(t, sched)
	if !sameBits(s.Losses, resumed) {
		t.Errorf("--seq-len-schedule 32:10,64 losses differ from the resumed runs':\n got %v\nwant %v",
			s.Losses, resumed)
	}
	if len(s.Stages) != 2 || s.Stages[0] != (StageResult{32, 0, 10, a.Program}) ||
		s.Stages[1] != (StageResult{64, 10, 20, b.Program}) || len(s.Checkpoints) != 0 {
		t.Errorf("stages %+v (checkpoints %v), want 32 for 1..10 in %s, 64 for 11..20 in %s, "+
			"checkpoints in a temporary folder", s.Stages, s.Checkpoints, a.Program, b.Program)
	}
	if !strings.Contains(log.String(), "stage 2/2: --seq-len 64, steps 11..20\n") {
		t.Errorf("progress does not name the stages:\n%s", log.String())
	}
	ref := "../testdata/trajectory/progressive.json"
	js, err := os.ReadFile(ref)
	if err != nil {
		t.Skipf("skipping the PyTorch comparison: %s is missing (made on the GPU machine by "+
			"python3 scripts/torch_trajectory.py OUT --progressive)", ref)
	}
	var tr trajectory
	if err := json.Unmarshal(js, &tr); err != nil {
		t.Fatal(err)
	}
	if len(tr.Losses) != 20 {
		t.Fatalf("%s: %d losses, want 20", ref, len(tr.Losses))
	}
	worst := 0.0
	for i := range tr.Losses {
		worst = max(worst, math.Abs(resumed[i]-tr.Losses[i])/math.Abs(tr.Losses[i]))
	}
	t.Logf("against PyTorch's 32:10,64 run: worst loss rel err %.3g", worst)
	if !(worst <= 1e-5) {
		t.Errorf("against PyTorch: loss rel err %.3g, want <= 1e-5:\n lcc %v\n torch %v", worst, resumed,
			tr.Losses)
	}
}

// TestSeqLenScheduleFlags: the schedule's syntax and its agreement with
// --steps and --seq-len, with errors naming the flag.
func TestSeqLenScheduleFlags(t *testing.T) {
	got, err := ParseSeqLenSchedule("65536:200,256K:400,1M")
	if err != nil || len(got) != 3 || got[0] != (Stage{65536, 200}) || got[1] != (Stage{262144, 400}) ||
		got[2] != (Stage{1 << 20, 0}) {
		t.Errorf("ParseSeqLenSchedule: %v, %v", got, err)
	}
	for _, bad := range []string{"", "32,64", "32:0,64", "x:3", "32:10,1"} {
		if _, err := ParseSeqLenSchedule(bad); err == nil || !strings.Contains(err.Error(), "--seq-len-schedule") {
			t.Errorf("%q: %v, want an error naming --seq-len-schedule", bad, err)
		}
	}
	for _, tc := range []struct {
		stages []Stage
		seq    int
		want   string
	}{
		{[]Stage{{32, 10}, {64, 0}}, 32, "--seq-len 32 and --seq-len-schedule"},
		{[]Stage{{32, 20}, {64, 0}}, 0, "the last stage would have none"},
		{[]Stage{{32, 10}, {64, 5}}, 0, "the stages take 15 steps, --steps is 20"},
		{[]Stage{{32, 10}, {64, 0}}, -2, "--seq-len-schedule with --ranks=2 needs --checkpoint-dir"},
	} {
		c := progressive(t)
		c.SeqLenSchedule, c.SeqLen = tc.stages, max(tc.seq, 0)
		if tc.seq < 0 {
			c.Ranks = -tc.seq
		}
		if _, err := Train(c); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.stages, err, tc.want)
		}
	}
}

// TestGPUSeqLenSchedule runs --seq-len-schedule 32:4,64 on the GPU with the
// state resident: each stage's program in one session (the first stage's arena
// released before the second is built), the CPU's losses within 1e-4.
func TestGPUSeqLenSchedule(t *testing.T) {
	dev := devicetest.Open(t)
	c := progressive(t)
	c.Steps, c.Warmup = 8, 2
	c.SeqLenSchedule = []Stage{{32, 4}, {64, 0}}
	want := run(t, c)
	got := run(t, gpuConfig(t, dev, c, tensor.F32, t.TempDir()))
	if !got.Resident || len(got.Losses) != 8 || len(got.Stages) != 2 {
		t.Fatalf("resident %v, %d losses, stages %+v", got.Resident, len(got.Losses), got.Stages)
	}
	for i := range want.Losses {
		if e := math.Abs(got.Losses[i]-want.Losses[i]) / math.Abs(want.Losses[i]); !(e <= 1e-4) {
			t.Errorf("step %d: GPU loss %.7g, CPU %.7g (relative %.2g)", i+1, got.Losses[i], want.Losses[i], e)
		}
	}
}
