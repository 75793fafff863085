package driver

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/lcc-dev/lcc/cost"
	"github.com/lcc-dev/lcc/internal/llamagen"
	"github.com/lcc-dev/lcc/report"
)

// hostPlanned compiles the dilated flagship at 1M tokens in bf16 on one H200
// under a 58 GiB GPU budget (which needs some of its per-layer checkpoints
// offloaded: TestFlagshipMillion58GiB) and host budget host (0: none).
func hostPlanned(t *testing.T, policy string, host int64) (*Result, error) {
	t.Helper()
	if testing.Short() {
		t.Skip("compiles a 1M-token step several times (3 s)")
	}
	f, err := llamagen.Build(llamagen.Flagship(1 << 20))
	if err != nil {
		t.Fatal(err)
	}
	return Compile(f, CompileOptions{Target: h200(t), Options: Options{Loss: "cross-entropy",
		Precision: "bf16", Attention: AttentionOptions{Mode: "dilated"}, Checkpoint: policy,
		MemoryBudget: 58 << 30, HostMemoryBudget: host}})
}

// TestHostPlanReported: the report's host peak is the model as lcc holds it
// (8 bytes an element of every weight; the optimizer's masters share the
// weights' storage and a fresh run's moments have no host tensor) plus the pinned offload block, printed beside the
// GPU's peak; a host budget that binds nothing leaves the program (its hash)
// as it is without one.
func TestHostPlanReported(t *testing.T) {
	res, err := hostPlanned(t, "auto", 0)
	if err != nil {
		t.Fatal(err)
	}
	m, c := res.Report.Memory, res.Report.Checkpoints
	n := res.Report.Params.Count
	if want := cost.HostModelBytes(n); m.HostModelBytes != want || want != 8*n {
		t.Errorf("host model %d bytes, want %d (%d parameters)", m.HostModelBytes, want, n)
	}
	// Every weight of the flagship trains: once on the GPU, the host keeps
	// none of it, and the peak is the setup's, beside the CUDA runtime's.
	if m.PinnedBytes != m.HostBytes || m.HostPeakBytes != m.HostModelBytes+m.PinnedBytes+m.HostRuntimeBytes ||
		m.HostBytes == 0 || m.HostKeptBytes != 0 || m.HostRuntimeBytes != cost.HostRuntimeBytes {
		t.Errorf("host peak %d = model %d (kept %d) + pinned %d (offload %d) + runtime %d", m.HostPeakBytes,
			m.HostModelBytes, m.HostKeptBytes, m.PinnedBytes, m.HostBytes, m.HostRuntimeBytes)
	}
	if c.Offloaded == 0 || c.Offloaded >= c.Offloadable || c.OffloadedBytes != m.HostBytes || c.Copies == nil ||
		!c.Copies.Hidden() {
		t.Errorf("partial offload: %+v", c)
	}
	var text bytes.Buffer
	res.Report.WriteText(&text)
	for _, want := range []string{"host peak", "kept values offloaded", "pinned), the rest on the GPU"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text report lacks %q:\n%s", want, text.String())
		}
	}
	loose, err := hostPlanned(t, "auto", 1<<40)
	if err != nil || loose.Hash != res.Hash {
		t.Errorf("a host budget that binds nothing: hash %s, %v; without one %s", loose.Hash, err, res.Hash)
	}
}

// TestHostBudgetPlans: a host budget too small for the pinned bytes partial
// offload needs makes auto recompute instead (passes' TestOffloadUnderHostBudget),
// and here, where recompute cannot fit the GPU, refuse with both figures, the
// host budget and the sequence length that would fit; an explicit offload policy past the budget is
// refused before anything is allocated, naming a policy that fits.
func TestHostBudgetPlans(t *testing.T) {
	res, err := hostPlanned(t, "auto", 0)
	if err != nil {
		t.Fatal(err)
	}
	m := res.Report.Memory
	tight := m.HostModelBytes + m.HostRuntimeBytes + m.HostBytes/2
	// Half the pinned bytes: the knapsack's recompute cannot reach 58 GiB
	// (69 GiB at best), so the plan is refused with what would fit.
	_, err = hostPlanned(t, "auto", tight)
	// layers+offload fits the GPU offloading 8 of its 12 values, 16 GiB: the
	// host budget that allows it is the model's and the runtime's beside them.
	fits := fmt.Sprintf("--host-memory-budget=%dGiB", (m.HostModelBytes+m.HostRuntimeBytes+16<<30+1<<30-1)>>30)
	for _, want := range []string{"smallest planned peak", "layers+offload would fit the GPU",
		"the host budget leaves", fits, "of --host-memory-budget", "about --seq-len="} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("auto under host budget %d: want %q in %v", tight, want, err)
		}
	}
	_, err = hostPlanned(t, "layers+offload", tight)
	for _, want := range []string{"does not fit the host", "pinned offloaded activations",
		"--host-memory-budget=", "--checkpoint=auto", "per GPU"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("explicit offload past the host budget: want %q in %v", want, err)
		}
	}
}

// TestResumeHostPlan (issue #26): the host plan of a step its trainer resumes
// (CompileOptions.Resume) holds the checkpoint's masters and moments beside
// the model while it loads, so its host peak is the fresh run's plus
// cost.ResumeStateBytes of the trained parameters (24 bytes each, the
// optimizer's step and the reader's chunk), with the same program; under a
// --host-memory-budget the fresh plan fits and the resume's does not, the
// resume is refused at compile, before anything is loaded, naming both
// figures and the resume's share.
func TestResumeHostPlan(t *testing.T) {
	f, err := llamagen.Build(llamagen.Config{Dim: 64, Layers: 2, Heads: 4, FFN: 192, Vocab: 512, Batch: 1,
		SeqLen: 128})
	if err != nil {
		t.Fatal(err)
	}
	compile := func(resume bool, budget int64) (*Result, error) {
		return Compile(f.Clone(), CompileOptions{Target: h200(t), Resume: resume, Options: Options{
			Loss: "cross-entropy", Precision: "bf16", HostMemoryBudget: budget}})
	}
	fresh, err := compile(false, 0)
	if err != nil {
		t.Fatal(err)
	}
	resumed, err := compile(true, 0)
	if err != nil {
		t.Fatal(err)
	}
	fm, rm, n := fresh.Report.Memory, resumed.Report.Memory, fresh.Report.Params.Count
	want := cost.ResumeStateBytes(n)
	if want != 24*n+8+4<<20 || rm.HostPeakBytes-fm.HostPeakBytes != want ||
		rm.HostResumeBytes != fm.HostModelBytes+want || fm.HostResumeBytes != 0 {
		t.Errorf("resume: host peak %d (resume phase %d), fresh %d (model %d): want %d more for %d parameters",
			rm.HostPeakBytes, rm.HostResumeBytes, fm.HostPeakBytes, fm.HostModelBytes, want, n)
	}
	if resumed.Hash != fresh.Hash {
		t.Errorf("resuming changed the program: %s, fresh %s", resumed.Hash, fresh.Hash)
	}
	var text bytes.Buffer
	resumed.Report.WriteText(&text)
	if s := report.Bytes(rm.HostResumeBytes) + " with the checkpoint a resume loads"; !strings.Contains(text.String(), s) {
		t.Errorf("text report lacks %q:\n%s", s, text.String())
	}

	budget := fm.HostPeakBytes
	if _, err := compile(false, budget); err != nil {
		t.Errorf("fresh under --host-memory-budget=%d: %v", budget, err)
	}
	_, err = compile(true, budget)
	for _, s := range []string{"does not fit the host", "its plan holds " + report.Bytes(rm.HostPeakBytes),
		report.Bytes(rm.HostResumeBytes) + " with the checkpoint --resume loads",
		"more than the " + report.Bytes(budget) + " of --host-memory-budget"} {
		if err == nil || !strings.Contains(err.Error(), s) {
			t.Errorf("resume under --host-memory-budget=%d: want %q in %v", budget, s, err)
		}
	}
}
