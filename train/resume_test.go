package train

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
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
	if b.FirstStep != 3 || !slices.Equal(bits(b.Losses), bits(straight.Losses[3:])) {
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
		if !slices.Equal(bits(b.Losses), bits(a.Losses[2:])) {
			t.Errorf("%s: losses %v, want %v", tc.why, b.Losses, a.Losses[2:])
		}
	}
}
