package train

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/lcc-dev/lcc/cost"
	"github.com/lcc-dev/lcc/internal/hostmem"
	"github.com/lcc-dev/lcc/internal/onnxgen"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
	"github.com/lcc-dev/lcc/train/optim"
)

// The environment of TestHostPeak's child: the model it sets up and the
// --host-memory-budget it plans under (none when empty).
const (
	hostPeakModelEnv  = "LCC_TEST_HOST_PEAK_MODEL"
	hostPeakBudgetEnv = "LCC_TEST_HOST_PEAK_BUDGET"
	// hostPeakResumeEnv, when set, is a --checkpoint-dir the child resumes
	// from (TestResumeHostPeak).
	hostPeakResumeEnv = "LCC_TEST_HOST_PEAK_RESUME"
)

// hostPeak is what TestHostPeak's child reports: its resident set's
// high-water mark (VmHWM) before the model is read and after the run is set
// up, the plan's host peak, the model's weights in fp32 bytes, the elements
// it trains, and the error that stopped the set-up ("" if none).
type hostPeak struct {
	Before, After, Planned, Weights, Trained int64
	Err                                      string
}

// setUpForGPU does on the host what lcc train --device=cuda --precision=bf16
// does there before its first step: load, compile, the optimizer's host state
// (newTrainer), the resume from the newest checkpoint in resume when it is
// not "" (trainer.resume), then the host side of the uploads (uploadOnHost).
func setUpForGPU(model string, budget int64, resume string) hostPeak {
	var p hostPeak
	_, p.Before, _ = hostmem.Resident()
	c := gpuSetUpConfig(model, budget, resume)
	t, err := newTrainer(c)
	if err == nil && resume != "" {
		_, err = t.resume(&Result{})
	}
	if err == nil {
		defer t.stream.Close()
		uploadOnHost(t)
		p.Planned = t.plannedHost
		for _, p2 := range t.grad.Params {
			if p2.Role == ir.RoleWeight {
				p.Weights += 4 * p2.Value.Type.Numel()
			}
		}
		for _, w := range t.upd.Weights {
			p.Trained += t.grad.Param(w).Value.Type.Numel()
		}
	} else {
		p.Err = err.Error()
	}
	_, p.After, _ = hostmem.Resident()
	return p
}

// gpuSetUpConfig is setUpForGPU's run: model at 64 tokens in bf16 on a GPU
// this test does not have, under budget, resuming from the folder resume
// when it is not "".
func gpuSetUpConfig(model string, budget int64, resume string) Config {
	c := DefaultConfig()
	c.Model, c.Data, c.Device, c.Precision = model, "synthetic:copy", "cuda", "bf16"
	c.SeqLen, c.Batch, c.Steps, c.Version, c.MinLR = 64, 1, 2, "test", c.LR/10
	c.HostMemoryBudget, c.Progress = budget, io.Discard
	c.CheckpointDir, c.Resume = resume, resume != ""
	c.Run = func(*ir.Func, map[string]*tensor.Tensor) (map[string]*tensor.Tensor, error) {
		return nil, fmt.Errorf("no GPU in this test")
	}
	return c
}

// uploadOnHost does on the host what setupResident's uploads do there, which
// this test cannot run without a GPU: Bind encodes each weight in the storage
// dtype a chunk at a time (runtime/exec's copyUp), the optimizer converts its
// fp32 state through one chunk (exec.Optimizer.Load); a fresh run's moments
// have no host tensor, and go up as zeros.
func uploadOnHost(t *trainer) {
	var sink byte
	chunk := make([]byte, 4<<20)
	for _, w := range t.weights {
		if !w.DType.IsFloat() {
			continue
		}
		bf := &tensor.Tensor{DType: tensor.BF16, Shape: w.Shape, F: w.F}
		for i := int64(0); i < int64(len(w.F)); i += int64(len(chunk)) / 2 {
			c := chunk[:2*min(int64(len(w.F))-i, int64(len(chunk))/2)]
			bf.EncodeAt(c, i)
			sink ^= c[0]
		}
	}
	buf := make([]float32, 1<<20)
	var n int
	for _, pre := range []string{optim.MasterPrefix, optim.MomentPrefix, optim.VariancePrefix} {
		for _, w := range t.upd.Weights {
			st := t.state[pre+w]
			if st == nil { // a fresh moment: zeros, no host tensor
				continue
			}
			for _, x := range st.F {
				buf[n] = float32(x)
				if n++; n == len(buf) {
					n = 0
				}
			}
		}
	}
	fmt.Fprint(os.Stderr, "", sink, buf[n] == 0)
}

// TestHostPeak (issue #26): setting up a GPU run of a 300 MB model peaks on
// the host, measured as the resident set's high-water mark of a child process
// that does only that, within 10% of the plan's host peak less the CUDA
// runtime's share (cost.HostRuntimeBytes; the child loads no CUDA). That part
// is the model as lcc holds it: 8 bytes an element of every weight (2x the
// fp32 weights: the masters share the weights' storage, and a fresh run's
// moments have no host tensor), and for the inline model its file's weight
// bytes once more, parsed beside the decoded weights (3x). Loading, binding
// and the optimizer's upload go through bounded chunks. Before, the plan
// counted the zero moments at 16 bytes a parameter (6x); on the device they
// were only partly resident, and the plan came out 18% and 38% over the 1.1B
// and 3B Llamas' measured peaks. The model is loaded both inline and with
// external data. A --host-memory-budget the plan passes is refused once the
// weights are loaded, before anything else is allocated.
func TestHostPeak(t *testing.T) {
	if model := os.Getenv(hostPeakModelEnv); model != "" {
		budget, _ := strconv.ParseInt(os.Getenv(hostPeakBudgetEnv), 10, 64)
		json.NewEncoder(os.Stdout).Encode(setUpForGPU(model, budget, ""))
		os.Exit(0)
	}
	if testing.Short() {
		t.Skip("writes and loads a 300 MB model")
	}
	dir := t.TempDir()
	external, err := onnxgen.LM(32768, 1024, 8).WriteExternal(dir, "lm.onnx")
	if err != nil {
		t.Fatal(err)
	}
	// The same model with its weights inline, as a model under 2 GiB may be.
	inline := filepath.Join(dir, "inline.onnx")
	if b, err := onnxgen.LM(32768, 1024, 8).Marshal(); err != nil || os.WriteFile(inline, b, 0o644) != nil {
		t.Fatal(err)
	}
	child := func(model string, budget int64) hostPeak {
		return hostPeakChild(t, "TestHostPeak", hostPeakModelEnv+"="+model, hostPeakBudgetEnv+"="+fmt.Sprint(budget))
	}
	mib := func(b int64) float64 { return float64(b) / (1 << 20) }
	var p hostPeak
	for _, model := range []string{inline, external} {
		if p = child(model, 0); p.Err != "" {
			t.Fatal(p.Err)
		}
		// 6x is the floor while host tensors hold float64 and the moments are
		// host tensors too.
		checkHostPeak(t, filepath.Base(model), p, 6)
	}

	// Half the plan: refused after the load, before anything more than the
	// weights is allocated (the external model's load holds its weights and a
	// chunk; its plan is those weights and the runtime's share).
	budget := p.Planned / 2
	r := child(external, budget)
	if !strings.Contains(r.Err, "does not fit the host") || float64(r.After) > 1.1*float64(p.Planned-cost.HostRuntimeBytes) {
		t.Errorf("under --host-memory-budget=%.0fMiB: peak %.0f MiB, error %q", mib(budget), mib(r.After), r.Err)
	}
}

// hostPeakChild runs test in a child process of this test binary with env
// added to the environment and returns the hostPeak it prints.
func hostPeakChild(t *testing.T, test string, env ...string) hostPeak {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	var p hostPeak
	if err := json.Unmarshal(out, &p); err != nil {
		t.Fatalf("child said %q: %v", out, err)
	}
	return p
}

// checkHostPeak holds TestHostPeak's child's figures p for model to the plan,
// and to floor times the fp32 weights (what the set-up holds at the least).
func checkHostPeak(t *testing.T, model string, p hostPeak, floor int64) {
	t.Helper()
	mib := func(b int64) float64 { return float64(b) / (1 << 20) }
	// The child loads no CUDA: the plan without the runtime's share is its part.
	if p.Planned -= cost.HostRuntimeBytes; p.Planned <= 0 {
		t.Fatalf("planned host peak %d without the runtime", p.Planned)
	}
	ratio := float64(p.After) / float64(p.Planned)
	t.Logf("%s: fp32 weights %.0f MiB; planned host peak %.0f MiB (%.2fx); measured %.0f MiB (%.2fx, "+
		"%+.1f%%), %.0f MiB before loading", model, mib(p.Weights), mib(p.Planned),
		float64(p.Planned)/float64(p.Weights), mib(p.After), float64(p.After)/float64(p.Weights),
		100*(ratio-1), mib(p.Before))
	if ratio > 1.1 || ratio < 0.9 {
		t.Errorf("%s: measured host peak %.0f MiB, planned %.0f MiB: more than 10%% apart", model,
			mib(p.After), mib(p.Planned))
	}
	if limit := floor*p.Weights*11/10 + 64<<20; p.After > limit {
		t.Errorf("%s: measured host peak %.0f MiB, more than %.1fx the fp32 weights + 64 MiB (%.0f MiB)",
			model, mib(p.After), 1.1*float64(floor), mib(limit))
	}
}
