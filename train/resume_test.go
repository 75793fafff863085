package train

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lcc-dev/lcc/internal/killtest"
)

// TestResumeNewRecomputePolicy: a run checkpointed with every activation kept
// resumes with per-layer recomputation. The policy changes the step's program
// but no weight, so the checkpoint is this model's, and the losses are a
// straight run's bit for bit (a recomputed value is bitwise the original).
func TestResumeNewRecomputePolicy(t *testing.T) {
	base := small(t, 6)
	base.Checkpoint = "none"
	straight := run(t, base)

	first := base
	first.CheckpointDir, first.StopAt = t.TempDir(), 3
	run(t, first)
	second := first
	second.StopAt, second.Resume, second.Checkpoint = 0, true, "layers"
	b := run(t, second)
	if b.Program == straight.Program {
		t.Fatalf("--checkpoint=layers compiled the program of --checkpoint=none (%s)", b.Program)
	}
	if b.FirstStep != 3 || !sameBits(b.Losses, straight.Losses[3:]) {
		t.Errorf("resumed from %d with losses %v, want from 3 with %v", b.FirstStep, b.Losses,
			straight.Losses[3:])
	}
}

// TestResumeSkipsInconsistent: the newest checkpoint's JSON is at odds with
// itself (a step other than its name's; a bad RNG state): the resume skips it,
// saying why, and continues from the one before instead of aborting.
func TestResumeSkipsInconsistent(t *testing.T) {
	c := small(t, 4)
	c.CheckpointDir, c.CheckpointEvery = t.TempDir(), 2
	a := run(t, c)
	newest := filepath.Join(c.CheckpointDir, "ckpt-00000004.json")
	orig, _ := os.ReadFile(newest)
	for _, tc := range []struct{ from, to, why string }{
		{`"step": 4,`, `"step": 99,`, "records step 99, its name step 4"},
		{`"rng": "`, `"rng": "x`, "rng state"},
	} {
		os.WriteFile(newest, []byte(strings.Replace(string(orig), tc.from, tc.to, 1)), 0o644)
		r := c
		r.Resume, r.Steps = true, 4
		var log strings.Builder
		r.Progress = &log
		b, err := Train(r)
		if err != nil {
			t.Fatalf("%s: the resume aborted: %v", tc.why, err)
		}
		if b.FirstStep != 2 || !strings.Contains(log.String(), "skipping "+newest) ||
			!strings.Contains(log.String(), tc.why) {
			t.Errorf("%s: resumed from %d:\n%s", tc.why, b.FirstStep, log.String())
		}
		if !sameBits(b.Losses, a.Losses[2:]) {
			t.Errorf("%s: losses %v, want %v", tc.why, b.Losses, a.Losses[2:])
		}
	}
}

// killRun is the run TestMetricsLineSurvivesKill kills: 6 steps of gpt_mini,
// checkpointed every 3 into dir, with metrics in dir.
func killRun(t *testing.T, dir string) Config {
	c := small(t, 6)
	c.CheckpointDir, c.CheckpointEvery = filepath.Join(dir, "ck"), 3
	c.Metrics = filepath.Join(dir, "m.jsonl")
	return c
}

// TestMetricsLineSurvivesKill: a run is SIGKILLed after step 3's checkpoint
// commits and before step 3's metrics line is written; the resume restores the
// line from the checkpoint, so the file holds every step once, with a straight
// run's losses.
func TestMetricsLineSurvivesKill(t *testing.T) {
	if dir := os.Getenv("LCC_METRICS_CHILD"); dir != "" {
		afterCheckpoint = func(step int) {
			if step == 3 {
				killtest.Here("COMMITTED")
			}
		}
		Train(killRun(t, dir))
		os.Exit(3) // not reached
	}
	dir := t.TempDir()
	var straight *Result
	line := killtest.Kill(t, "TestMetricsLineSurvivesKill", "LCC_METRICS_CHILD", dir,
		func() { straight = run(t, small(t, 6)) })
	if line != "COMMITTED\n" {
		t.Fatalf("child said %q", line)
	}
	c := killRun(t, dir)
	if got := metricLines(t, c.Metrics); len(got) != 2 {
		t.Fatalf("the killed run wrote %d lines, want steps 1 and 2", len(got))
	}
	c.Resume = true
	if r := run(t, c); r.FirstStep != 3 {
		t.Fatalf("resumed from step %d, want 3", r.FirstStep)
	}
	got := metricLines(t, c.Metrics)
	for s := 1; s <= 6; s++ {
		if loss, ok := got[s]; !ok || loss != straight.Losses[s-1] {
			t.Errorf("step %d: line %v (present %v), a straight run's loss %v", s, loss, ok,
				straight.Losses[s-1])
		}
	}
}
