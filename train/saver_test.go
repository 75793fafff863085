package train

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/lcc-dev/lcc/runtime/cuda"
	"github.com/lcc-dev/lcc/tensor"
	"github.com/lcc-dev/lcc/train/checkpoint"
)

// TestGPUCheckpointBackground trains gpt_mini on the GPU with a checkpoint
// every 2 steps taken in the background, in fp32 and bf16. It wants each
// checkpoint to hold the bits of a synchronous download of the device state at
// its step (staged on the device, and not, with the next step run before the
// write finished), the metrics to mark the checkpoint steps, the per-step host
// traffic to stay the token batch, and a resume from step 4 to continue bit for
// bit: the same losses and the same final checkpoint bytes as the straight run.
func TestGPUCheckpointBackground(t *testing.T) {
	dev, err := cuda.Open(0)
	if err != nil {
		t.Skipf("skipping: no usable GPU: %v", err)
	}
	defer dev.Close()
	for _, st := range []tensor.DType{tensor.F32, tensor.BF16} {
		t.Run(st.String(), func(t *testing.T) {
			c := small(t, 6)
			if st == tensor.BF16 {
				c.Precision = "bf16"
			}
			c.CheckpointDir, c.CheckpointEvery, c.Keep = t.TempDir(), 2, 0
			c.Metrics = filepath.Join(t.TempDir(), "m.jsonl")
			straight := run(t, gpuConfig(t, dev, c, st))
			if len(straight.Checkpoints) != 3 {
				t.Fatalf("checkpoints %v, want steps 2, 4, 6", straight.Checkpoints)
			}
			batch := int64(c.Batch * c.SeqLen * 8 * 2)
			if straight.HostBytes > batch+64 || straight.HostBytes < batch {
				t.Errorf("host traffic %d bytes per step, want the batch (%d) + at most 64", straight.HostBytes, batch)
			}
			checkMetrics(t, c.Metrics, map[int]bool{2: true, 4: true, 6: true})

			resumed := c
			resumed.CheckpointDir = t.TempDir()
			for _, name := range []string{"ckpt-00000004.json", "ckpt-00000004.safetensors"} {
				raw, err := os.ReadFile(filepath.Join(c.CheckpointDir, name))
				if err != nil {
					t.Fatal(err)
				}
				os.WriteFile(filepath.Join(resumed.CheckpointDir, name), raw, 0o644)
			}
			resumed.Resume, resumed.Metrics = true, ""
			r := run(t, gpuConfig(t, dev, resumed, st))
			if r.FirstStep != 4 || !slices.Equal(bits(r.Losses), bits(straight.Losses[4:])) {
				t.Errorf("resumed from step %d: losses %v, straight run %v", r.FirstStep, r.Losses, straight.Losses[4:])
			}
			a, _ := os.ReadFile(filepath.Join(c.CheckpointDir, "ckpt-00000006.safetensors"))
			b, _ := os.ReadFile(filepath.Join(resumed.CheckpointDir, "ckpt-00000006.safetensors"))
			if len(a) == 0 || !slices.Equal(a, b) {
				t.Error("the resumed run's last checkpoint differs from the straight run's")
			}

			synchronousPull(t, gpuConfig(t, dev, c, st))
		})
	}
}

// checkMetrics wants step_ms on every line of the metrics file, checkpoint and
// checkpoint_bytes exactly on the steps in ckpt, and checkpoint_ms there.
func checkMetrics(t *testing.T, path string, ckpt map[int]bool) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m metric
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatal(err)
		}
		if m.StepMS <= 0 || m.Checkpoint != ckpt[m.Step] || (ckpt[m.Step] && m.CheckpointMS <= 0) ||
			(m.CheckpointBytes > 0) != ckpt[m.Step] {
			t.Errorf("metrics: %s", sc.Text())
		}
	}
}

// synchronousPull runs c's steps by hand and, at steps 2 (staged) and 4 (not
// staged: the next update waits for the copy), downloads the device state
// synchronously before queueing the checkpoint, then runs the next step at
// once; each written checkpoint must hold exactly the downloaded bits.
func synchronousPull(t *testing.T, c Config) {
	c.MinLR, c.Progress, c.CheckpointDir = c.LR/10, io.Discard, t.TempDir()
	tr, err := newTrainer(c)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.stream.Close()
	if err := tr.setupResident(); err != nil {
		t.Fatal(err)
	}
	defer tr.dev.opt.Close()
	if tr.dev.saver, err = tr.newSaver(); err != nil {
		t.Fatal(err)
	}
	defer tr.closeSaver()
	if !tr.dev.saver.stage {
		t.Fatal("gpt_mini's staging copy does not fit the budget")
	}
	res := &Result{}
	want := map[string]map[string]*tensor.Tensor{}
	for s := range 5 {
		st, err := tr.step(s)
		if err != nil {
			t.Fatal(err)
		}
		if step := s + 1; step == 2 || step == 4 {
			master, m, v, err := tr.dev.opt.Save()
			if err != nil {
				t.Fatal(err)
			}
			want[filepath.Base(checkpoint.Base(c.CheckpointDir, step))+".json"] =
				tr.residentTensors(master, m, v, tr.dev.done)
			tr.dev.saver.stage = step == 2
			if _, err := tr.checkpoint(res, step, st.loss); err != nil {
				t.Fatal(err)
			}
			if tr.dev.saver.snap.Staged() != (step == 2) {
				t.Errorf("step %d: staged %v", step, tr.dev.saver.snap.Staged())
			}
		}
		if _, err := tr.pollSave(res); err != nil {
			t.Fatal(err)
		}
	}
	if err := tr.finishSave(res); err != nil {
		t.Fatal(err)
	}
	if len(res.Checkpoints) != 2 {
		t.Fatalf("checkpoints %v, want 2", res.Checkpoints)
	}
	for _, p := range res.Checkpoints {
		ck, err := checkpoint.Load(p, tr.wantCheckpoint())
		if err != nil {
			t.Fatal(err)
		}
		w := want[filepath.Base(p)]
		if len(ck.Tensors) != len(w) {
			t.Errorf("%s: %d tensors, the synchronous pull %d", p, len(ck.Tensors), len(w))
		}
		for name, wt := range w {
			if got := ck.Tensors[name]; got == nil || got.DType != wt.DType ||
				!slices.Equal(got.Encode(), wt.Encode()) {
				t.Errorf("%s: tensor %q differs from the synchronous pull", p, name)
			}
		}
	}
}
