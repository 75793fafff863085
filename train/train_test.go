package train

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lcc-dev/lcc/driver"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/passes"
	"github.com/lcc-dev/lcc/runtime/comm"
	"github.com/lcc-dev/lcc/safetensors"
)

// TestStep checks the step Train trains: the pipeline's program with the loss
// package's choice of loss, fused cross-entropy, and the program hash.
func TestStep(t *testing.T) {
	c := small(t, 1)
	st := step(t, c)
	fused := countOps(st.Func, ir.OpFusedLinearCrossEntropy)
	if st.Loss != "loss" || fused != 1 || !strings.HasPrefix(st.Hash, "sha256:") || st.Program == nil {
		t.Errorf("gpt_mini: loss %q, %d fused cross-entropy, hash %q, program %v", st.Loss, fused,
			st.Hash, st.Program != nil)
	}
	if got := st.Func.Param("labels").Value.Type.String(); got != "i64[batch=2,seq=16]" {
		t.Errorf("labels type %s, want i64[batch=2,seq=16]", got)
	}
	c.Model = gptMiniLoss
	if st, err := Step(c); err != nil || st.Loss != "cross_entropy_loss" {
		t.Errorf("gpt_mini_loss: %v; want its own cross_entropy_loss", err)
	}
	for _, tc := range []struct {
		loss, want string
	}{
		{"model", "--loss=model: func @main_graph has no scalar float output"},
		{"none", "--loss=none: nothing to train"},
		{"mse", `--loss "mse"`},
	} {
		c := small(t, 1)
		c.Loss = tc.loss
		if _, err := Step(c); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--loss=%s: %v, want %q", tc.loss, err, tc.want)
		}
	}
}

// TestLossFalls trains the copy task briefly: the loss must fall well below its
// start (it learns the alphabet first, then to copy).
func TestLossFalls(t *testing.T) {
	c := small(t, 60)
	c.Batch = 4
	r := run(t, c)
	first, last := mean(r.Losses[:10]), mean(r.Losses[50:])
	t.Logf("first 10 %.4f, last 10 %.4f, %.0f tok/s", first, last, r.TokensPerSec)
	if !(last < 0.85*first) {
		t.Errorf("mean loss of the last 10 steps %.4f is not below 0.85 × the first 10 (%.4f)", last, first)
	}
}

// TestResumeBitIdentical splits a 20-step run (with warmup and gradient
// accumulation) at step 10 and checks every loss of the resumed half, and the
// final weights, against a straight run, bit for bit.
func TestResumeBitIdentical(t *testing.T) {
	base := small(t, 20)
	base.Warmup, base.Accumulate = 3, 2
	straight := base
	straight.CheckpointDir = t.TempDir()
	a := run(t, straight)

	dir := t.TempDir()
	first := base
	first.CheckpointDir, first.StopAt = dir, 10
	if r := run(t, first); r.Step != 10 || !sameBits(r.Losses, a.Losses[:10]) {
		t.Fatalf("first half: step %d, losses differ from the straight run", r.Step)
	}
	second := base
	second.CheckpointDir, second.Resume = dir, true
	var log strings.Builder
	second.Progress = &log
	b := run(t, second)
	if b.FirstStep != 10 || b.Step != 20 || !strings.HasSuffix(b.Resumed, "ckpt-00000010.json") {
		t.Fatalf("resumed run: %+v", b)
	}
	if !sameBits(b.Losses, a.Losses[10:]) {
		t.Errorf("resumed losses differ:\n got %v\nwant %v", b.Losses, a.Losses[10:])
	}
	// Same weights and optimizer state: the final checkpoints are the same bytes.
	ra, _ := os.ReadFile(filepath.Join(straight.CheckpointDir, "ckpt-00000020.safetensors"))
	rb, _ := os.ReadFile(filepath.Join(dir, "ckpt-00000020.safetensors"))
	if len(ra) == 0 || !bytes.Equal(ra, rb) {
		t.Error("final checkpoints differ")
	}
	if strings.Contains(log.String(), "changed") {
		t.Errorf("resume reported a settings change:\n%s", log.String())
	}

	// Changing --steps changes the schedule; the resume says so.
	log.Reset()
	second.Steps, second.StopAt = 22, 21
	run(t, second)
	if !strings.Contains(log.String(), "steps changed from 20 to 22") {
		t.Errorf("resume did not report the changed schedule:\n%s", log.String())
	}
}

// TestModelLoss trains gpt_mini_loss, which computes its own loss from labels.
func TestModelLoss(t *testing.T) {
	c := small(t, 2)
	c.Model = gptMiniLoss
	if r := run(t, c); len(r.Losses) != 2 || !(r.Losses[0] > 5) {
		t.Errorf("losses %v, want two near ln(512)", r.Losses)
	}
}

// TestResumeSkipsBad damages the newest checkpoint: resume says which it skipped
// and why, continues from the previous one, and still matches a straight run. A
// checkpoint of another model (other weights) is refused naming the file.
func TestResumeSkipsBad(t *testing.T) {
	dir := t.TempDir()
	c := small(t, 8)
	c.CheckpointDir, c.CheckpointEvery = dir, 4
	a := run(t, c)
	raw, _ := os.ReadFile(filepath.Join(dir, "ckpt-00000008.safetensors"))
	os.WriteFile(filepath.Join(dir, "ckpt-00000008.safetensors"), raw[:len(raw)-100], 0o644)

	c.Resume = true
	var log strings.Builder
	c.Progress = &log
	b := run(t, c)
	if !strings.Contains(log.String(), "skipping "+filepath.Join(dir, "ckpt-00000008.json")) ||
		!strings.Contains(log.String(), "corrupt or truncated") {
		t.Errorf("resume log does not name the skipped checkpoint and why:\n%s", log.String())
	}
	if b.FirstStep != 4 || !sameBits(b.Losses, a.Losses[4:]) {
		t.Errorf("resumed from %d with losses %v, want from 4 with %v", b.FirstStep, b.Losses, a.Losses[4:])
	}

	other := c
	other.Model = "../testdata/onnx/llama_mini.onnx" // other weights
	_, err := Train(other)
	if err == nil || !strings.Contains(err.Error(), "is of another model") ||
		!strings.Contains(err.Error(), "no valid checkpoint in "+dir) {
		t.Errorf("resume with another model: %v", err)
	}
}

// TestMetricsAndProgress checks the JSON lines and the progress line.
func TestMetricsAndProgress(t *testing.T) {
	c := small(t, 4)
	c.Metrics = filepath.Join(t.TempDir(), "m.jsonl")
	c.ProgressEvery = 2
	var log strings.Builder
	c.Progress = &log
	r := run(t, c)
	n := 0
	for _, m := range readMetrics(t, c.Metrics) {
		for _, k := range []string{"step", "loss", "lr", "grad_norm", "tokens_per_s", "planned_peak_bytes"} {
			if _, ok := m.Keys[k]; !ok {
				t.Errorf("line %d lacks %q: %s", n+1, k, m.Text)
			}
		}
		if pk := m.Keys["planned_peak_bytes"]; pk != float64(r.PlannedPeakBytes) || r.PlannedPeakBytes <= 0 {
			t.Errorf("line %d: planned_peak_bytes %v, the run's %d", n+1, pk, r.PlannedPeakBytes)
		}
		n++
		if m.Step != n || m.Loss != r.Losses[n-1] {
			t.Errorf("line %d: %s", n, m.Text)
		}
	}
	if n != 4 {
		t.Errorf("%d metrics lines, want 4", n)
	}
	// A resume from step 2 rewrites the file as one straight run would.
	ck := small(t, 4)
	ck.CheckpointDir, ck.CheckpointEvery, ck.Metrics = t.TempDir(), 2, c.Metrics
	run(t, ck)
	os.Remove(filepath.Join(ck.CheckpointDir, "ckpt-00000004.json"))
	ck.Resume = true
	run(t, ck)
	got, _ := os.ReadFile(c.Metrics)
	if strings.Count(string(got), "\n") != 4 || !strings.Contains(string(got), `{"step":4,`) {
		t.Errorf("metrics after resume:\n%s", got)
	}
	if !strings.Contains(log.String(), "step 2/4  loss ") || !strings.Contains(log.String(), "tok/s") ||
		!strings.Contains(log.String(), "ETA") || strings.Count(log.String(), "\n") != 4 ||
		!strings.Contains(log.String(), "\nmemory  on the CPU (interpreter, f32): the step lines show the host "+
			"heap; the plan for h200x1 is ") || strings.Contains(log.String(), "planned peak") ||
		!strings.HasPrefix(log.String(), "program sha256:"+r.Program[len("sha256:"):]+"\n") {
		t.Errorf("progress:\n%s", log.String())
	}
}

// TestFileData trains on a bytes file, and reports an out-of-vocabulary token
// of a tokens file with its offset.
func TestFileData(t *testing.T) {
	dir := t.TempDir()
	text := filepath.Join(dir, "text.txt")
	os.WriteFile(text, []byte(strings.Repeat("the quick brown fox jumps over the lazy dog. ", 20)), 0o644)
	c := small(t, 2)
	c.Data = "bytes:" + text
	run(t, c)

	toks := filepath.Join(dir, "toks.bin")
	raw := make([]byte, 2*40)
	raw[2*7], raw[2*7+1] = 0x10, 0x27 // token 10000 at byte offset 14
	os.WriteFile(toks, raw, 0o644)
	c.Data = "tokens:" + toks
	_, err := Train(c)
	if err == nil || !strings.Contains(err.Error(), "token 10000 at byte offset 14") {
		t.Errorf("out-of-vocabulary token: %v", err)
	}
}

// TestConfigErrors checks that bad settings are errors naming the flag.
func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		mod  func(*Config)
		want string
	}{
		{func(c *Config) { c.Device = "cuda" }, "no GPU executor"},
		{func(c *Config) { c.Device = "tpu" }, "--device"},
		{func(c *Config) { c.Data = "" }, "--data"},
		{func(c *Config) { c.Data = "synthetic:nope" }, "--data"},
		{func(c *Config) { c.SeqLen = 0 }, "--seq-len: required"},
		{func(c *Config) { c.SeqLen = 1 }, "--seq-len 1: want >= 2"},
		{func(c *Config) { c.Batch = -1 }, "--batch"},
		{func(c *Config) { c.Steps = 0 }, "--steps: required"},
		{func(c *Config) { c.StopAt = 99 }, "--stop-at"},
		{func(c *Config) { c.LR = 0 }, "--lr"},
		{func(c *Config) { c.MinLR = 1 }, "--min-lr"},
		{func(c *Config) { c.Warmup = -1 }, "--warmup"},
		{func(c *Config) { c.Warmup = 4 }, "--warmup 4: want <= --steps (3)"},
		{func(c *Config) { c.WeightDecay = -1 }, "--weight-decay -1: want >= 0"},
		{func(c *Config) { c.WeightDecay = math.NaN() }, "--weight-decay NaN: want >= 0"},
		{func(c *Config) { c.Clip = -1 }, "--clip -1: want >= 0 (0 turns clipping off)"},
		{func(c *Config) { c.Clip = math.NaN() }, "--clip NaN"},
		{func(c *Config) { c.Accumulate = 0 }, "--accumulate"},
		{func(c *Config) { c.TokenBytes = 3 }, "--token-bytes"},
		{func(c *Config) { c.Resume = true }, "--resume needs --checkpoint-dir"},
		{func(c *Config) { c.CheckpointEvery = 5 }, "--checkpoint-every needs --checkpoint-dir"},
		{func(c *Config) { c.Loss = "model" }, "--loss=model"},
		{func(c *Config) { c.Model = "nope.onnx" }, "nope.onnx"},
	} {
		c := small(t, 3)
		tc.mod(&c)
		if _, err := Train(c); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want an error containing %q", err, tc.want)
		}
	}
}

// TestUntiedScalesDiffer: PyTorch's exporter merged gpt_mini's five LayerNorm
// scales (all ones at initialisation) into one initializer. lcc trains them as
// the five parameters PyTorch has, says so, and after 20 steps they differ.
func TestUntiedScalesDiffer(t *testing.T) {
	c := small(t, 20)
	c.CheckpointDir = t.TempDir()
	var log strings.Builder
	c.Log = &log
	run(t, c)
	if !strings.Contains(log.String(), "lcc: note: untied 8 parameter(s)") ||
		!strings.Contains(log.String(), "lnf.weight (merged into blocks.0.ln1.weight)") {
		t.Errorf("no note about the untied parameters:\n%s", log.String())
	}
	ck, err := safetensors.Read(filepath.Join(c.CheckpointDir, "ckpt-00000020.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"blocks.0.ln1.weight", "blocks.0.ln2.weight", "blocks.1.ln1.weight",
		"blocks.1.ln2.weight", "lnf.weight"}
	for i, a := range names {
		wa := ck.Tensors[a]
		if wa == nil {
			t.Fatalf("checkpoint lacks %s (has %v)", a, ck.Names)
		}
		for _, b := range names[:i] {
			wb := ck.Tensors[b]
			same := true
			for k := range wa.F {
				same = same && wa.F[k] == wb.F[k]
			}
			if same {
				t.Errorf("%s and %s are equal after 20 steps: still tied", a, b)
			}
		}
	}
}

// TestStepRankZeroIsCompiled: rank 0 of a sharded run trains the program whose
// hash lcc compile reports for the same flags (driver.Compile with --ranks):
// the rank-specific build, ring kernels and collectives included.
func TestStepRankZeroIsCompiled(t *testing.T) {
	c := small(t, 1)
	c.Model = "../testdata/onnx/llama_mini.onnx"
	c.Ranks, c.ShardMode = 2, passes.ShardRing
	c.Comm = comm.NewWorld(2, time.Second).Endpoint(0)
	st, err := Step(c)
	if err != nil {
		t.Fatal(err)
	}
	f, err := driver.Load(c.Model, driver.Bindings{SeqLen: int64(c.SeqLen), Batch: int64(c.Batch)})
	if err != nil {
		t.Fatal(err)
	}
	res, err := driver.Compile(f, driver.CompileOptions{Target: c.Target, Model: c.Model,
		Options: driver.Options{Loss: c.Loss, Ranks: 2, ShardMode: passes.ShardRing}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Report.Sharding == nil || st.Hash != res.Hash || res.Report.ProgramHash != st.Hash {
		t.Errorf("rank 0 trains %s; lcc compile --ranks=2 reports %s (sharded %v)", st.Hash,
			res.Report.ProgramHash, res.Report.Sharding != nil)
	}
}
