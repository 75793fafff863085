package snapshot

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lcc-dev/lcc/internal/killtest"
	"github.com/lcc-dev/lcc/internal/userfile/fifotest"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
	"github.com/lcc-dev/lcc/train/data"
)

// state makes the tensors of a checkpoint at step v: a weight big enough to
// need several write chunks, its optimizer state and the optimizer's step.
func state(v float64) (map[string]*tensor.Tensor, Want) {
	w := tensor.New(tensor.F32, 300, 100)
	for i := range w.F {
		w.F[i] = v
	}
	ts := map[string]*tensor.Tensor{"w": w, "optim.step": tensor.Scalar(tensor.F64, v),
		"optim.master.w": w, "optim.adam.m.w": w, "optim.adam.v.w": w}
	want := Want{ParamsHash: "abc", Tensors: map[string]ir.Type{}}
	for name, t := range ts {
		want.Tensors[name] = ir.T(t.DType, t.Shape...)
	}
	return ts, want
}

// meta is the JSON of a checkpoint at step of a run of 100 steps.
func meta(step int) Meta {
	return Meta{ParamsHash: "abc", Data: data.State{Spec: "synthetic:copy", Sequences: int64(step),
		RNG: "0123456789abcdef"}, Config: map[string]any{"steps": 100},
		Params: map[string]Param{"w": {Name: "w"}}}
}

func save(t *testing.T, dir string, step int) string {
	t.Helper()
	ts, _ := state(float64(step))
	p, err := Save(dir, step, meta(step), ts)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// editJSON rewrites the JSON of the checkpoint at base (its path without
// extension) with edit applied.
func editJSON(base string, edit func(m *Meta)) {
	var m Meta
	js, _ := os.ReadFile(base + ".json")
	json.Unmarshal(js, &m)
	edit(&m)
	js, _ = json.Marshal(m)
	os.WriteFile(base+".json", js, 0o644)
}

// resave writes the checkpoint at base again with its step's tensors edited,
// its JSON consistent with them.
func resave(base string, edit func(ts map[string]*tensor.Tensor)) {
	var step int
	fmt.Sscanf(filepath.Base(base), "ckpt-%d", &step)
	ts, _ := state(float64(step))
	edit(ts)
	Save(filepath.Dir(base), step, meta(step), ts)
}

// TestRoundTrip saves and loads a checkpoint.
func TestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	p := save(t, dir, 10)
	_, want := state(0)
	c, err := Load(p, want)
	if err != nil {
		t.Fatal(err)
	}
	if c.Meta.Step != 10 || c.Meta.Data.Sequences != 10 || c.Tensors["w"].F[5] != 10 {
		t.Errorf("loaded %+v", c.Meta)
	}
}

// TestLoadInto: Load decodes a tensor into Want.Into's tensor of its name, in
// place, when it has the tensor's dtype and shape, and into a new one when
// not (leaving that one as it was); with a Want that names tensors it holds
// only those and the optimizer's step, without one every tensor of the file.
func TestLoadInto(t *testing.T) {
	dir := t.TempDir()
	p := save(t, dir, 10)
	_, want := state(0)
	delete(want.Tensors, "optim.adam.v.w")
	w, other := tensor.New(tensor.F32, 300, 100), tensor.New(tensor.F32, 3)
	want.Into = map[string]*tensor.Tensor{"w": w, "optim.master.w": other}
	c, err := Load(p, want)
	if err != nil {
		t.Fatal(err)
	}
	if c.Tensors["w"] != w || w.F[7] != 10 {
		t.Errorf("w was not decoded into Want.Into's tensor")
	}
	if m := c.Tensors["optim.master.w"]; m == other || m.F[7] != 10 || other.F[0] != 0 {
		t.Errorf("a tensor unlike Want.Into's was decoded into it")
	}
	if _, held := c.Tensors["optim.adam.v.w"]; held || len(c.Tensors) != 4 {
		t.Errorf("held %d tensors, want the 4 Want names", len(c.Tensors))
	}
	if all, err := Load(p, Want{}); err != nil || len(all.Tensors) != 5 {
		t.Errorf("without a Want: %v, want the file's 5 tensors", err)
	}
}

// TestRefused checks every kind of bad checkpoint is refused with an error naming
// the file and the problem, and that Latest falls back to the newest valid one:
// with the run's Want (--resume) and, for what a reader without the model can
// tell (export is set), with none (lcc export).
func TestRefused(t *testing.T) {
	_, want := state(0)
	for _, tc := range []struct {
		name    string
		corrupt func(base string)
		want    string
		export  bool
	}{
		{"bad JSON", func(b string) { os.WriteFile(b+".json", []byte(`{"format": 1, "step`), 0o644) },
			"bad JSON", true},
		{"other model", func(b string) {
			js, _ := os.ReadFile(b + ".json")
			os.WriteFile(b+".json", []byte(strings.Replace(string(js), `"abc"`, `"xyz"`, 1)), 0o644)
		}, "is of another model", false},
		{"truncated tensors", func(b string) {
			raw, _ := os.ReadFile(b + ".safetensors")
			os.WriteFile(b+".safetensors", raw[:len(raw)/2], 0o644)
		}, "corrupt or truncated", true},
		{"missing tensors file", func(b string) { os.Remove(b + ".safetensors") }, "no such file", true},
		{"missing tensor", func(b string) {
			resave(b, func(ts map[string]*tensor.Tensor) { delete(ts, "w") })
		}, `missing tensors "w"`, false},
		{"wrong shape", func(b string) {
			resave(b, func(ts map[string]*tensor.Tensor) { ts["w"] = tensor.New(tensor.F32, 3) })
		}, `"w" is f32[3], want f32[300,100]`, false},

		// A checkpoint at odds with itself, which lcc export refuses too.
		{"step past its name", func(b string) { editJSON(b, func(m *Meta) { m.Step = 99 }) },
			"records step 99, its name step 20", true},
		{"negative step", func(b string) { editJSON(b, func(m *Meta) { m.Step = -5 }) },
			"records step -5, its name step 20", true},
		{"step past --steps", func(b string) {
			editJSON(b, func(m *Meta) { m.Config["steps"] = 10 })
		}, "records step 20, past the run's --steps 10", true},
		{"another checkpoint's tensors", func(b string) {
			other := filepath.Join(filepath.Dir(b), "ckpt-00000010")
			js, _ := os.ReadFile(other + ".json")
			var m Meta
			json.Unmarshal(js, &m)
			editJSON(b, func(mine *Meta) { mine.Tensors, mine.TensorsSHA256 = m.Tensors, m.TensorsSHA256 })
		}, `names tensors file "ckpt-00000010.safetensors", want "ckpt-00000020.safetensors"`, true},
		{"negative data position", func(b string) {
			editJSON(b, func(m *Meta) { m.Data.Sequences = -1 })
		}, "position -1", true},
		{"bad rng state", func(b string) { editJSON(b, func(m *Meta) { m.Data.RNG = "zz" }) },
			`rng state "zz"`, true},
		{"data position before the step", func(b string) {
			editJSON(b, func(m *Meta) { m.Data.Sequences = 3 })
		}, "data position 3 is before step 20's", true},
		{"optimizer step differs", func(b string) {
			resave(b, func(ts map[string]*tensor.Tensor) {
				ts["optim.step"] = tensor.Scalar(tensor.F64, 19)
			})
		}, "optimizer step 19, the JSON's 20", true},
		{"no optimizer step", func(b string) {
			resave(b, func(ts map[string]*tensor.Tensor) { delete(ts, "optim.step") })
		}, `no optimizer step (an f64[] "optim.step")`, true},
		{"empty weights", func(b string) {
			resave(b, func(ts map[string]*tensor.Tensor) {
				for _, n := range []string{"w", "optim.master.w", "optim.adam.m.w", "optim.adam.v.w"} {
					ts[n] = tensor.New(tensor.F32, 0)
				}
			})
		}, "is f32[0], empty", true},
		{"integer weight", func(b string) {
			resave(b, func(ts map[string]*tensor.Tensor) { ts["w"] = tensor.New(tensor.I64, 300, 100) })
		}, `weight "w" is i64, not floating point`, true},
		{"state unlike its weight", func(b string) {
			resave(b, func(ts map[string]*tensor.Tensor) {
				ts["optim.adam.v.w"] = tensor.New(tensor.F32, 2)
			})
		}, `optimizer state "optim.adam.v.w" is f32[2], want f32[300,100] as its weight`, true},
		{"renamed weight", func(b string) {
			resave(b, func(ts map[string]*tensor.Tensor) { ts["w2"] = ts["w"]; delete(ts, "w") })
		}, `optimizer state "optim.adam.m.w" is of weight "w", which the file lacks (renamed?)`, true},
		{"renamed weight and state", func(b string) {
			resave(b, func(ts map[string]*tensor.Tensor) {
				for _, n := range []string{"w", "optim.master.w", "optim.adam.m.w", "optim.adam.v.w"} {
					ts[n+"2"] = ts[n]
					delete(ts, n)
				}
			})
		}, `weight "w2" is not among the JSON's params (renamed?)`, true},
		{"tensors file is a named pipe", func(b string) {
			os.Remove(b + ".safetensors")
			fifotest.Make(t, filepath.Dir(b), "ckpt-00000020.safetensors")
		}, "not a regular file (a named pipe)", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			save(t, dir, 10)
			p := save(t, dir, 20)
			tc.corrupt(strings.TrimSuffix(p, ".json"))
			// The message is checked with the Want that is to give it; the run's Want
			// may refuse an export case first, for its own reason.
			wants := []Want{want}
			if tc.export {
				wants = []Want{Want{}, want}
			}
			for i, w := range wants {
				var err, lerr error
				var c *Checkpoint
				var skipped []Skipped
				fifotest.Within(t, 10*time.Second, []string{strings.TrimSuffix(p, ".json") + ".safetensors"},
					func() {
						_, err = Load(p, w)
						c, skipped, lerr = Latest(dir, w)
					})
				if err == nil || !strings.Contains(err.Error(), p) ||
					i == 0 && !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("Load: got %v, want an error naming %s and containing %q", err, p, tc.want)
				}
				if lerr != nil || c == nil || c.Meta.Step != 10 {
					t.Fatalf("Latest: %v, %v; want step 10", c, lerr)
				}
				if len(skipped) != 1 || skipped[0].Path != p {
					t.Errorf("skipped %v, want %s", skipped, p)
				}
			}
		})
	}
}

// TestPrune keeps the newest checkpoints.
func TestPrune(t *testing.T) {
	dir := t.TempDir()
	for _, s := range []int{5, 10, 15, 20} {
		save(t, dir, s)
	}
	if err := Prune(dir, 2); err != nil {
		t.Fatal(err)
	}
	ps, _ := List(dir)
	ms, _ := filepath.Glob(filepath.Join(dir, "*"))
	if len(ps) != 2 || !strings.HasSuffix(ps[0], "ckpt-00000020.json") || len(ms) != 4 {
		t.Errorf("after Prune(2): %v (all files %v)", ps, ms)
	}
}

// TestWriterFails makes the writer fail half-way through the new checkpoint's
// tensors, and then through its JSON: both times the previous checkpoint is still
// the newest valid one and no temp file is left.
func TestWriterFails(t *testing.T) {
	_, want := state(0)
	for _, target := range []string{".safetensors", ".json"} {
		dir := t.TempDir()
		save(t, dir, 10)
		writeHook = func(path string, n int) error {
			if strings.HasSuffix(path, target) {
				return errors.New("injected fault")
			}
			return nil
		}
		ts, _ := state(20)
		_, err := Save(dir, 20, meta(20), ts)
		writeHook = nil
		if err == nil || !strings.Contains(err.Error(), "injected fault") {
			t.Fatalf("%s: Save: %v", target, err)
		}
		c, _, err := Latest(dir, want)
		if err != nil || c == nil || c.Meta.Step != 10 {
			t.Fatalf("%s: Latest after a failed write: %v, %v", target, c, err)
		}
		if tmps, _ := filepath.Glob(filepath.Join(dir, ".*tmp*")); len(tmps) > 0 {
			t.Errorf("%s: temp files left: %v", target, tmps)
		}
		// A failed JSON (a full disk) leaves no orphan tensors file behind.
		if left, _ := filepath.Glob(filepath.Join(dir, "ckpt-00000020.*")); len(left) > 0 {
			t.Errorf("%s: files of the failed checkpoint left: %v", target, left)
		}
	}
}

// TestPipeAsJSON: a named pipe named like the newest checkpoint's JSON is
// skipped at once, saying what it is, and the one before it is taken.
func TestPipeAsJSON(t *testing.T) {
	dir := t.TempDir()
	save(t, dir, 10)
	pipe := fifotest.Make(t, dir, "ckpt-00000020.json")
	_, want := state(0)
	var c *Checkpoint
	var skipped []Skipped
	var err error
	fifotest.Within(t, 10*time.Second, []string{pipe}, func() { c, skipped, err = Latest(dir, want) })
	if err != nil || c == nil || c.Meta.Step != 10 || len(skipped) != 1 ||
		!strings.Contains(skipped[0].Err.Error(), "not a regular file (a named pipe)") {
		t.Fatalf("Latest: %v, skipped %v, %v; want step 10, the pipe skipped", c, skipped, err)
	}
}

// TestKilledWriter runs a writer in a child process, SIGKILLs it while the new
// checkpoint's tensors are half written, and checks the previous checkpoint still
// loads (the child's temp file is ignored, then cleaned by the next Save).
func TestKilledWriter(t *testing.T) {
	if dir := os.Getenv("LCC_CHECKPOINT_CHILD"); dir != "" {
		writeHook = func(path string, n int) error {
			if strings.HasSuffix(path, ".safetensors") && n >= writeChunk {
				killtest.Here("HALF-WRITTEN")
			}
			return nil
		}
		ts, _ := state(20)
		Save(dir, 20, meta(20), ts)
		os.Exit(3) // not reached
	}
	dir := t.TempDir()
	save(t, dir, 10)
	if line := killtest.Kill(t, "TestKilledWriter", "LCC_CHECKPOINT_CHILD", dir, nil); line != "HALF-WRITTEN\n" {
		t.Fatalf("child said %q", line)
	}
	tmps, _ := filepath.Glob(filepath.Join(dir, ".ckpt-00000020.safetensors.tmp-*"))
	if len(tmps) != 1 {
		t.Fatalf("expected the killed writer's temp file, found %v", tmps)
	}
	_, want := state(0)
	c, skipped, err := Latest(dir, want)
	if err != nil || c == nil || c.Meta.Step != 10 || len(skipped) != 0 {
		t.Fatalf("Latest after SIGKILL: %v, skipped %v, %v; want step 10", c, skipped, err)
	}
	if c.Tensors["w"].F[0] != 10 {
		t.Errorf("step 10's tensors read back wrong")
	}
	save(t, dir, 11)
	if tmps, _ := filepath.Glob(filepath.Join(dir, ".*tmp*")); len(tmps) > 0 {
		t.Errorf("temp files left after the next Save: %v", tmps)
	}
}
