package perf

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/lcc-dev/lcc/runtime/exec"
	"github.com/lcc-dev/lcc/targets"
)

// TestRoofline: over two steps, a GEMM family's FLOPs per step against the
// GEMM ceiling, a memory-bound family's bytes against the copy ceiling (and
// flagged when it moves over 100 MB below 80%), attention shown without a
// share, a collective without a ceiling, and the optimizer's passes in bytes
// per parameter beside the floor; slowest family first.
func TestRoofline(t *testing.T) {
	h200, _ := targets.ForGPU("NVIDIA H200")
	ms := func(x float64) time.Duration { return time.Duration(x * float64(time.Millisecond)) }
	fams := map[string]exec.Family{
		// 397 GFLOP per step in 1 ms: 397 TFLOP/s, half of 794.
		"matmul": {Kind: "gemm", Time: ms(2), Launches: 40, FLOPs: 2 * 397e9},
		// 210 MB per step in 0.1 ms: 2.1 TB/s, half of 4.2.
		"elementwise": {Kind: "kernel", Time: ms(0.2), Launches: 100, Bytes: 2 * 210e6},
		// 42 MB in 0.0125 ms: 3.36 TB/s, 80%, too small to flag anyway.
		"rms_norm":            {Kind: "kernel", Time: ms(0.025), Launches: 4, Bytes: 2 * 42e6},
		"attention.flash.fwd": {Kind: "kernel", Time: ms(1), Launches: 8, Bytes: 2 * 10e6},
		"all_reduce":          {Kind: "collective", Time: ms(0.5), Launches: 2, Bytes: 2 * 1e6},
		"optim.norm":          {Kind: "optim", Time: ms(0.002), Launches: 4, Bytes: 2 * 2e6},
		"optim.adamw":         {Kind: "optim", Time: ms(0.016), Launches: 2, Bytes: 2 * 28e6},
	}
	rows := Roofline(fams, 2, h200, 1e6)
	var order []string
	byName := map[string]RooflineRow{}
	for _, r := range rows {
		order = append(order, r.Family)
		byName[r.Family] = r
	}
	if got := strings.Join(order, " "); got !=
		"matmul attention.flash.fwd all_reduce elementwise rms_norm optim.adamw optim.norm" {
		t.Errorf("order %s", got)
	}
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Abs(b) }
	if r := byName["matmul"]; !near(r.Rate, 397) || !near(r.Share, 0.5) || r.Launches != 20 || r.Unit != "TFLOP/s" {
		t.Errorf("matmul %+v", r)
	}
	if r := byName["elementwise"]; !near(r.Rate, 2.1) || !near(r.Share, 0.5) || r.Ceiling != "copy" {
		t.Errorf("elementwise %+v", r)
	}
	if r := byName["optim.adamw"]; !near(r.PerParam, 28) || r.Ceiling != "copy" {
		t.Errorf("optim.adamw %+v", r)
	}
	if r := byName["attention.flash.fwd"]; r.Ceiling != "" || !strings.Contains(r.Why, "compute bound") {
		t.Errorf("attention %+v", r)
	}
	var b strings.Builder
	WriteRoofline(&b, rows, h200)
	out := b.String()
	for _, want := range []string{
		"roofline per step on NVIDIA H200 (ceilings: copy 4.20 TB/s, bf16 GEMM 794 TFLOP/s",
		"  matmul                           20.0    397.0 GFLOP     1.000   397.00 TFLOP/s   50.0% of GEMM\n",
		"  elementwise                      50.0       210.0 MB     0.100     2.10 TB/s      50.0% of copy (below 80%)\n",
		"  rms_norm                          2.0        42.0 MB     0.013     3.36 TB/s      80.0% of copy\n",
		"compute bound (FLOPs not counted)",
		"runs on a link, not HBM",
		"28.0 B/param",
		"memory-bound families over 100.0 MB per step below 80% of copy: elementwise\n",
		"optimizer: 30.0 B/param a step; the floor is one pass over the state, 28.0 B/param",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
}
