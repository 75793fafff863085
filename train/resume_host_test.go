package train

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lcc-dev/lcc/cost"
	"github.com/lcc-dev/lcc/internal/onnxgen"
	"github.com/lcc-dev/lcc/report"
	"github.com/lcc-dev/lcc/tensor"
	"github.com/lcc-dev/lcc/train/optim"
)

// resumeSaveEnv, when set, makes TestResumeHostPeak's child write a checkpoint
// of step 1 of its model (hostPeakModelEnv) into that folder.
const resumeSaveEnv = "LCC_TEST_RESUME_SAVE"

// saveForResume writes what a run of model that has done one step would
// checkpoint into dir: its weights, masters and moments (the weights' values,
// so that every element is written), step 1.
func saveForResume(model, dir string) error {
	c := gpuSetUpConfig(model, 0, "")
	c.CheckpointDir = dir
	tr, err := newTrainer(c)
	if err != nil {
		return err
	}
	defer tr.stream.Close()
	if _, err := tr.stream.Next(); err != nil { // the data position of step 1
		return err
	}
	for _, w := range tr.upd.Weights {
		for _, pre := range []string{optim.MomentPrefix, optim.VariancePrefix} {
			tr.state[pre+w] = tr.weights[w].Clone()
		}
	}
	tr.state[optim.StepState] = tensor.Scalar(tensor.F64, 1)
	_, err = tr.save(1, 1, nil)
	return err
}

// TestResumeHostPeak (issue #26): setting up a GPU run of a 300 MB model
// that resumes from its checkpoint peaks on the host, measured as the
// resident set's high-water mark of a child process that does only that
// (TestHostPeak's), within 10% of the plan's host peak less the CUDA
// runtime's share. The plan of the resume is the fresh run's plus the
// checkpoint's masters and moments at 8 bytes an element each, the
// optimizer's step and the reader's chunk (cost.ResumeStateBytes): the
// checkpoint's weights are decoded into the model's, and the file streams
// through one chunk. Before, the reader held the 1.2 GB file in a buffer that
// doubled past 1 GiB beside a second decoded copy of the weights: the child
// peaked at 5996 MiB (20.8x the fp32 weights) where the plan said 576 MiB;
// streaming, it holds 8x the fp32 weights.
func TestResumeHostPeak(t *testing.T) {
	if dir := os.Getenv(resumeSaveEnv); dir != "" {
		var p hostPeak
		if err := saveForResume(os.Getenv(hostPeakModelEnv), dir); err != nil {
			p.Err = err.Error()
		}
		json.NewEncoder(os.Stdout).Encode(p)
		os.Exit(0)
	}
	if model := os.Getenv(hostPeakModelEnv); model != "" {
		json.NewEncoder(os.Stdout).Encode(setUpForGPU(model, 0, os.Getenv(hostPeakResumeEnv)))
		os.Exit(0)
	}
	if testing.Short() {
		t.Skip("writes a 300 MB model and its 1.2 GB checkpoint")
	}
	dir := t.TempDir()
	model, err := onnxgen.LM(32768, 1024, 8).WriteExternal(dir, "lm.onnx")
	if err != nil {
		t.Fatal(err)
	}
	ckpt := filepath.Join(dir, "ckpt")
	child := func(env ...string) hostPeak {
		p := hostPeakChild(t, "TestResumeHostPeak", append(env, hostPeakModelEnv+"="+model)...)
		if p.Err != "" {
			t.Fatal(p.Err)
		}
		return p
	}
	child(resumeSaveEnv + "=" + ckpt)
	fresh, p := child(), child(hostPeakResumeEnv+"="+ckpt)
	if got, want := p.Planned-fresh.Planned, cost.ResumeStateBytes(p.Trained); got != want {
		t.Errorf("the resume's plan is %d bytes over the fresh run's, want %d (cost.ResumeStateBytes of %d "+
			"trained elements)", got, want, p.Trained)
	}
	// 8x: the model (8 bytes an element, 2x the fp32 weights) and its masters
	// and moments (24 bytes a trained element, all of them here).
	checkHostPeak(t, "lm.onnx resumed", p, 8)
}

// TestResumeHostBudget (issue #26): lcc train --resume plans the checkpoint's
// state it loads: under the --host-memory-budget of the fresh run's plan, the
// resume is refused when it compiles, before it reads the checkpoint (here
// one it could not load), with its plan's host peak and the budget; the
// budget of its own plan fits.
func TestResumeHostBudget(t *testing.T) {
	tr, err := newTrainer(gpuSetUpConfig(gptMini, 0, ""))
	if err != nil {
		t.Fatal(err)
	}
	tr.stream.Close()
	var trained int64
	for _, w := range tr.upd.Weights {
		trained += tr.grad.Param(w).Value.Type.Numel()
	}
	// gpt_mini's weights are inline: its set-up holds the file beside them,
	// collected before a resume loads.
	fresh := tr.plannedHost
	resumed := loadedBytes(tr.grad) + cost.ResumeStateBytes(trained) + cost.HostRuntimeBytes
	if resumed <= fresh {
		t.Fatalf("the resume's phase %d is not the peak (fresh %d)", resumed, fresh)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "ckpt-00000001.json"), []byte("not JSON"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = newTrainer(gpuSetUpConfig(gptMini, fresh, dir))
	for _, want := range []string{"does not fit the host", "its plan holds " + report.Bytes(resumed),
		"with the checkpoint --resume loads", "more than the " + report.Bytes(fresh) + " of --host-memory-budget"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("resume under the fresh plan's budget: want %q in %v", want, err)
		}
	}
	tr, err = newTrainer(gpuSetUpConfig(gptMini, resumed, dir))
	if err != nil {
		t.Fatalf("resume under its plan's budget: %v", err)
	}
	tr.stream.Close()
	if tr.plannedHost != resumed {
		t.Errorf("the resume's plan holds %d bytes on the host, want %d", tr.plannedHost, resumed)
	}
}
