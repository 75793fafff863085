package train

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lcc-dev/lcc/runtime/cuda/devicetest"
	"github.com/lcc-dev/lcc/tensor"
	"github.com/lcc-dev/lcc/train/optim"
	"github.com/lcc-dev/lcc/train/snapshot"
)

// TestGPUCheckpointBackground trains gpt_mini on the GPU with a checkpoint
// every 2 steps taken in the background, in fp32 and bf16. It wants each
// checkpoint to hold the bits of a synchronous download of the device state at
// its step (staged on the device, and not, with the next step run before the
// write finished), the metrics to mark the checkpoint steps, the per-step host
// traffic to stay the token batch, and a resume from step 4 to continue bit for
// bit: the same losses and the same final checkpoint bytes as the straight run.
func TestGPUCheckpointBackground(t *testing.T) {
	dev := devicetest.Open(t)
	cache := t.TempDir()
	for _, st := range []tensor.DType{tensor.F32, tensor.BF16} {
		t.Run(st.String(), func(t *testing.T) {
			c := small(t, 6)
			if st == tensor.BF16 {
				c.Precision = "bf16"
			}
			c.CheckpointDir, c.CheckpointEvery, c.Keep = t.TempDir(), 2, 0
			c.Metrics = filepath.Join(t.TempDir(), "m.jsonl")
			straight := run(t, gpuConfig(t, dev, c, st, cache))
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
			r := run(t, gpuConfig(t, dev, resumed, st, cache))
			if r.FirstStep != 4 || !sameBits(r.Losses, straight.Losses[4:]) {
				t.Errorf("resumed from step %d: losses %v, straight run %v", r.FirstStep, r.Losses, straight.Losses[4:])
			}
			a, _ := os.ReadFile(filepath.Join(c.CheckpointDir, "ckpt-00000006.safetensors"))
			b, _ := os.ReadFile(filepath.Join(resumed.CheckpointDir, "ckpt-00000006.safetensors"))
			if len(a) == 0 || !slices.Equal(a, b) {
				t.Error("the resumed run's last checkpoint differs from the straight run's")
			}

			synchronousPull(t, gpuConfig(t, dev, c, st, cache))
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
// synchronously and writes it as a checkpoint did before checkpoints moved to
// the background, then queues the checkpoint and runs the next step at once;
// the two safetensors files must be the same bytes.
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
	res, ref := &Result{}, t.TempDir()
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
			if _, err := snapshot.Save(ref, step, tr.meta(st.loss, nil), tr.pulledTensors(master, m, v,
				tr.dev.done)); err != nil {
				t.Fatal(err)
			}
			tr.dev.saver.stage = step == 2
			if _, err := tr.checkpoint(res, step, st.loss, nil); err != nil {
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
		if _, err := snapshot.Load(p, tr.wantCheckpoint()); err != nil {
			t.Fatal(err)
		}
		st := strings.TrimSuffix(filepath.Base(p), ".json") + ".safetensors"
		got, _ := os.ReadFile(filepath.Join(c.CheckpointDir, st))
		want, _ := os.ReadFile(filepath.Join(ref, st))
		if len(want) == 0 || !slices.Equal(got, want) {
			t.Errorf("%s differs from the synchronous pull's", st)
		}
	}
}

// TestResidentRaw wants residentRaw's files to be the bytes of the float64
// tensors a synchronous download gives, on values with every kind of fp32
// (NaNs quiet and signalling, infinities, subnormals, halfway cases of bf16
// rounding), with fp32 weights (as exporters write them) and, through
// roundF32, bf16 ones.
func TestResidentRaw(t *testing.T) {
	for _, prec := range []string{"fp32", "bf16"} {
		c := small(t, 1)
		c.Precision, c.MinLR, c.Progress = prec, c.LR/10, io.Discard
		tr, err := newTrainer(c)
		if err != nil {
			t.Fatal(err)
		}
		defer tr.stream.Close()
		specials := []uint32{0x7fc00000, 0x7f800001, 0xffa00000, 0x7f800000, 0xff800000, 0x00000001,
			0x80400000, 0x3f808000, 0x3f818000, 0x3f80ffff, 0x7f7fffff, 0}
		rng, k := uint32(12345), 0
		var master, m, v [][]byte
		var mt, mot, vt []*tensor.Tensor
		for _, w := range tr.upd.Weights {
			shape := tr.grad.Param(w).Value.Type.Shape
			for _, dst := range []struct {
				raw *[][]byte
				ts  *[]*tensor.Tensor
			}{{&master, &mt}, {&m, &mot}, {&v, &vt}} {
				raw := make([]byte, 4*tensor.Elements[int](shape))
				for i := 0; i < len(raw); i += 4 {
					rng = rng*1664525 + 1013904223
					u := rng
					if rng%7 == 0 {
						u, k = specials[k%len(specials)], k+1
					}
					raw[i], raw[i+1], raw[i+2], raw[i+3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
				}
				x, err := tensor.Decode(tensor.F32, shape, raw)
				if err != nil {
					t.Fatal(err)
				}
				*dst.raw, *dst.ts = append(*dst.raw, raw), append(*dst.ts, x)
			}
		}
		dir, ref := t.TempDir(), t.TempDir()
		if _, err := snapshot.Save(ref, 3, snapshot.Meta{}, tr.pulledTensors(mt, mot, vt, 3)); err != nil {
			t.Fatal(err)
		}
		if _, err := snapshot.SaveRaw(dir, 3, snapshot.Meta{}, tr.residentRaw(master, m, v, 3)); err != nil {
			t.Fatal(err)
		}
		got, _ := os.ReadFile(filepath.Join(dir, "ckpt-00000003.safetensors"))
		want, _ := os.ReadFile(filepath.Join(ref, "ckpt-00000003.safetensors"))
		if len(want) == 0 || !slices.Equal(got, want) {
			t.Errorf("%s: residentRaw's file (%d bytes) differs from the tensors' (%d bytes)", prec,
				len(got), len(want))
		}
		for i, x := range mt {
			if got, want := roundF32(tensor.BF16, master[i]), tensor.FromFloats(tensor.BF16, x.Shape,
				x.F).Encode(); !slices.Equal(got, want) {
				t.Errorf("master %d rounded to bf16 differs from the tensor's", i)
			}
		}
	}
}

// pulledTensors is what a checkpoint of a resident run held when it was
// taken synchronously (the reference residentRaw must match): the masters and
// moments downloaded as tensors, each trained weight as its master rounded to
// the weight's dtype, the step count, and the rest of t.weights and t.state.
func (t *trainer) pulledTensors(master, m, v []*tensor.Tensor, done int) map[string]*tensor.Tensor {
	ts := make(map[string]*tensor.Tensor, len(t.weights)+len(t.state))
	for k, w := range t.weights {
		ts[k] = w
	}
	for k, st := range t.state {
		ts[optimPrefix+k] = st
	}
	for i, w := range t.upd.Weights {
		ts[optimPrefix+optim.MasterPrefix+w] = master[i]
		ts[optimPrefix+optim.MomentPrefix+w] = m[i]
		ts[optimPrefix+optim.VariancePrefix+w] = v[i]
		wt := t.grad.Param(w).Value.Type
		ts[w] = tensor.FromFloats(wt.DType, wt.Shape, master[i].F)
	}
	ts[optimPrefix+optim.StepState] = tensor.Scalar(tensor.F64, float64(done))
	return ts
}
