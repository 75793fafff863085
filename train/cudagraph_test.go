package train

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	cudagen "github.com/lcc-dev/lcc/codegen/cuda"
	"github.com/lcc-dev/lcc/runtime/cuda/devicetest"
	"github.com/lcc-dev/lcc/runtime/exec"
	"github.com/lcc-dev/lcc/tensor"
)

// graphRun trains c on the GPU with --cuda-graph=graph, writing metrics and a
// checkpoint of the last step, and returns the result, the gradient norm of
// every step (from the metrics) and the checkpoint's tensor file.
func graphRun(t *testing.T, c Config, graph string, st tensor.DType, cache string) (*Result, []float64, []byte) {
	t.Helper()
	dev := devicetest.Open(t)
	c.CUDAGraph = graph
	c.Metrics = filepath.Join(t.TempDir(), "metrics.jsonl")
	c.CheckpointDir = t.TempDir()
	res := run(t, gpuConfig(t, dev, c, st, cache))
	raw, err := os.ReadFile(c.Metrics)
	if err != nil {
		t.Fatal(err)
	}
	var norms []float64
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		var m struct {
			GradNorm float64 `json:"grad_norm"`
		}
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("metrics line %q: %v", sc.Text(), err)
		}
		norms = append(norms, m.GradNorm)
	}
	ckpt, err := os.ReadFile(filepath.Join(c.CheckpointDir, "ckpt-00000006.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	return res, norms, ckpt
}

// TestGPUCUDAGraph trains llama_mini for six steps on the GPU, in fp32 and
// bf16 (and bf16 accumulating two micro-batches), with the step and the AdamW update captured as CUDA graphs (the
// learning rate changes every step: warmup) and launched one by one: the
// losses, the gradient norms and the final weights and optimizer state (the
// checkpoint's bytes) are the same bit for bit, since the graph replays the
// same kernels on the same addresses. The captured run says so, with the
// plan's launch count; the other says capture was turned off.
func TestGPUCUDAGraph(t *testing.T) {
	cache := t.TempDir()
	for _, tc := range []struct {
		name       string
		st         tensor.DType
		accumulate int
	}{{"fp32", tensor.F32, 1}, {"bf16", tensor.BF16, 1}, {"bf16-accumulate", tensor.BF16, 2}} {
		st := tc.st
		t.Run(tc.name, func(t *testing.T) {
			c := small(t, 6)
			c.Model, c.Clip, c.Accumulate = "../testdata/onnx/llama_mini.onnx", 1, tc.accumulate
			if st == tensor.BF16 {
				c.Precision = "bf16"
			}
			on, onNorms, onCkpt := graphRun(t, c, "on", st, cache)
			off, offNorms, offCkpt := graphRun(t, c, "off", st, cache)
			if !strings.HasPrefix(on.CUDAGraph, "captured ") ||
				!strings.Contains(on.CUDAGraph, "; optimizer captured 3 launches") {
				t.Errorf("--cuda-graph=on: %q, want the step and the update captured", on.CUDAGraph)
			}
			if off.CUDAGraph != "not captured: turned off (--cuda-graph=off); "+
				"optimizer not captured: turned off (--cuda-graph=off)" {
				t.Errorf("--cuda-graph=off: %q", off.CUDAGraph)
			}
			if !sameBits(on.Losses, off.Losses) {
				t.Errorf("losses captured %v, uncaptured %v", on.Losses, off.Losses)
			}
			if !sameBits(onNorms, offNorms) || len(onNorms) != 6 {
				t.Errorf("gradient norms captured %v, uncaptured %v", onNorms, offNorms)
			}
			if !bytes.Equal(onCkpt, offCkpt) {
				t.Errorf("the final checkpoints differ (%d and %d bytes)", len(onCkpt), len(offCkpt))
			}
			if on.Program == off.Program {
				t.Errorf("captured and uncaptured steps share the program hash %s", on.Program)
			}
			t.Logf("%s; losses %.6f..%.6f", on.CUDAGraph, on.Losses[0], on.Losses[len(on.Losses)-1])
		})
	}
}

// TestGPUCUDAGraphOffload: a step that offloads activations to pinned host
// memory is not captured, and says which step and why; it still trains.
func TestGPUCUDAGraphOffload(t *testing.T) {
	dev := devicetest.Open(t)
	c := offloadConfig(t, true)
	res := run(t, gpuConfig(t, dev, c, tensor.F32, t.TempDir()))
	if !strings.HasPrefix(res.CUDAGraph, "not captured: step ") ||
		!strings.Contains(res.CUDAGraph, "offloaded activation") {
		t.Errorf("offloading step: %q, want it not captured for its offload copies", res.CUDAGraph)
	}
}

// TestGPURoofline profiles llama_mini's bf16 step: a profiled step runs
// uncaptured and says so; every family's launches per step add up to the
// plan's steps plus the optimizer's three; AdamW moves 28 bytes and the norm
// 2 per trained element; the GEMMs' FLOPs are the plan's.
func TestGPURoofline(t *testing.T) {
	dev := devicetest.Open(t)
	c := small(t, 4)
	c.Model, c.Precision = "../testdata/onnx/llama_mini.onnx", "bf16"
	s := exec.NewSession(dev, exec.Options{Storage: tensor.BF16, Profile: true, CacheDir: t.TempDir()})
	defer s.Close()
	c.Device, c.Session, c.Run, c.Adopt, c.GPU = "cuda", s, s.Run, s.Adopt, s.GPU()
	res := run(t, c)
	if !strings.HasPrefix(res.CUDAGraph, "not captured: --profile") {
		t.Errorf("a profiled step: %q", res.CUDAGraph)
	}
	st := step(t, c)
	plan := st.Program.Plan
	var launches int
	var flops int64
	for _, f := range res.Roofline {
		launches += f.Launches
		flops += f.FLOPs
	}
	var want int64
	for _, w := range cudagen.PlanWork(plan) {
		want += w.FLOPs
	}
	n := res.ProfileSteps
	if n != 3 || launches != n*(len(plan.Steps)+3) || flops != int64(n)*want || want == 0 {
		t.Errorf("%d profiled steps: %d launches, %d FLOPs; the plan has %d steps (+3 optimizer), %d FLOPs",
			n, launches, flops, len(plan.Steps), want)
	}
	per := func(fam string) float64 {
		return float64(res.Roofline[fam].Bytes) / float64(int64(n)*res.TrainedElements)
	}
	if per("optim.adamw") != 28 || per("optim.norm") != 2 {
		t.Errorf("optimizer bytes per parameter: adamw %g, norm %g; want 28 and 2", per("optim.adamw"),
			per("optim.norm"))
	}
}
