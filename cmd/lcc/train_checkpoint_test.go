package main

import (
	"strings"
	"testing"
	"time"

	"github.com/lcc-dev/lcc/train"
)

// TestPrintCheckpointTimes checks the lines that put each checkpoint step, and
// the step after it, beside the median of the other steps after the first.
func TestPrintCheckpointTimes(t *testing.T) {
	ms := time.Millisecond
	r := &train.Result{FirstStep: 10,
		StepTimes:       []time.Duration{900 * ms, 40 * ms, 41 * ms, 39 * ms, 44 * ms, 40 * ms, 30 * ms},
		CheckpointTimes: []time.Duration{0, 0, 0, 2 * ms, 0, 0, 0},
		Checkpointed:    []bool{false, false, false, true, false, false, false}}
	var out strings.Builder
	printCheckpointTimes(&out, r)
	want := "checkpoint steps against the median of the 4 other steps after the first, 40.00 ms:\n" +
		"  step 14: 39.00 ms + 2.00 ms on the checkpoint (1.02x); step 15, overlapping its copy: 44.00 ms (1.10x)\n"
	if out.String() != want {
		t.Errorf("got\n%s\nwant\n%s", out.String(), want)
	}
	out.Reset()
	printCheckpointTimes(&out, &train.Result{StepTimes: r.StepTimes, CheckpointTimes: make([]time.Duration, 7),
		Checkpointed: make([]bool, 7)})
	if out.Len() != 0 {
		t.Errorf("a run without checkpoints printed %q", out.String())
	}
}
