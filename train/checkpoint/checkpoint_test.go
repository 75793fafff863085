package checkpoint

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
	"github.com/lcc-dev/lcc/train/data"
)

// state makes a checkpoint's tensors: one big enough to need several write chunks.
func state(v float64) (map[string]*tensor.Tensor, Want) {
	w := tensor.New(tensor.F32, 300, 100)
	for i := range w.F {
		w.F[i] = v
	}
	ts := map[string]*tensor.Tensor{"w": w, "optim.step": tensor.Scalar(tensor.F64, v)}
	want := Want{ModelHash: "abc", Tensors: map[string]ir.Type{
		"w": ir.T(tensor.F32, 300, 100), "optim.step": ir.T(tensor.F64)}}
	return ts, want
}

func save(t *testing.T, dir string, step int) string {
	t.Helper()
	ts, _ := state(float64(step))
	p, err := Save(dir, step, Meta{ModelHash: "abc", Data: data.State{Spec: "synthetic:copy",
		Sequences: int64(step), RNG: "0123456789abcdef"}}, ts)
	if err != nil {
		t.Fatal(err)
	}
	return p
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

// TestRefused checks every kind of bad checkpoint is refused with an error naming
// the file and the problem, and that Latest falls back to the newest valid one.
func TestRefused(t *testing.T) {
	_, want := state(0)
	for _, tc := range []struct {
		name    string
		corrupt func(base string)
		want    string
	}{
		{"bad JSON", func(b string) { os.WriteFile(b+".json", []byte(`{"format": 1, "step`), 0o644) },
			"bad JSON"},
		{"other model", func(b string) {
			js, _ := os.ReadFile(b + ".json")
			os.WriteFile(b+".json", []byte(strings.Replace(string(js), `"abc"`, `"xyz"`, 1)), 0o644)
		}, "is of another model"},
		{"truncated tensors", func(b string) {
			raw, _ := os.ReadFile(b + ".safetensors")
			os.WriteFile(b+".safetensors", raw[:len(raw)/2], 0o644)
		}, "corrupt or truncated"},
		{"missing tensors file", func(b string) { os.Remove(b + ".safetensors") }, "no such file"},
		{"missing tensor", func(b string) {
			ts, _ := state(20)
			delete(ts, "w")
			Save(filepath.Dir(b), 20, Meta{ModelHash: "abc"}, ts)
		}, `missing tensors "w"`},
		{"wrong shape", func(b string) {
			ts, _ := state(20)
			ts["w"] = tensor.New(tensor.F32, 3)
			Save(filepath.Dir(b), 20, Meta{ModelHash: "abc"}, ts)
		}, `"w" is f32[3], want f32[300,100]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			save(t, dir, 10)
			p := save(t, dir, 20)
			tc.corrupt(strings.TrimSuffix(p, ".json"))
			_, err := Load(p, want)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), p) {
				t.Fatalf("Load: got %v, want an error naming %s and containing %q", err, p, tc.want)
			}
			c, skipped, err := Latest(dir, want)
			if err != nil || c == nil || c.Meta.Step != 10 {
				t.Fatalf("Latest: %v, %v; want step 10", c, err)
			}
			if len(skipped) != 1 || skipped[0].Path != p {
				t.Errorf("skipped %v, want %s", skipped, p)
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
		_, err := Save(dir, 20, Meta{ModelHash: "abc"}, ts)
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
	}
}

// TestKilledWriter runs a writer in a child process, SIGKILLs it while the new
// checkpoint's tensors are half written, and checks the previous checkpoint still
// loads (the child's temp file is ignored, then cleaned by the next Save).
func TestKilledWriter(t *testing.T) {
	if dir := os.Getenv("LCC_CHECKPOINT_CHILD"); dir != "" {
		writeHook = func(path string, n int) error {
			if strings.HasSuffix(path, ".safetensors") && n >= writeChunk {
				os.Stdout.WriteString("HALF-WRITTEN\n")
				time.Sleep(time.Minute) // killed here
			}
			return nil
		}
		ts, _ := state(20)
		Save(dir, 20, Meta{ModelHash: "abc"}, ts)
		os.Exit(3) // not reached
	}
	dir := t.TempDir()
	save(t, dir, 10)
	cmd := exec.Command(os.Args[0], "-test.run=^TestKilledWriter$")
	cmd.Env = append(os.Environ(), "LCC_CHECKPOINT_CHILD="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	if line != "HALF-WRITTEN\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("child said %q", line)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
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
