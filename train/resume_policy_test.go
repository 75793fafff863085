package train

import (
	"slices"
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
