package snapshot

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
	"github.com/lcc-dev/lcc/train/data"
)

// shaMark in a fuzzed JSON stands for the digest of the fuzzed tensors file,
// so that mutations of the tensors reach the decoder and the validator instead
// of all failing the digest.
const shaMark = "@SHA@"

// FuzzLoad feeds Load a checkpoint's two files, JSON and safetensors, as a
// hostile folder holds them: Load must return a checkpoint or an error, never
// panic, and a checkpoint it returns must be consistent.
func FuzzLoad(f *testing.F) {
	dir := f.TempDir()
	w := tensor.New(tensor.F32, 2, 3)
	ts := map[string]*tensor.Tensor{"w": w, "optim.step": tensor.Scalar(tensor.F64, 7),
		"optim.master.w": w, "optim.adam.m.w": w, "optim.adam.v.w": w}
	p, err := Save(dir, 7, Meta{ParamsHash: "abc",
		Data:   data.State{Spec: "synthetic:copy", Sequences: 7, RNG: "0123456789abcdef"},
		Config: map[string]any{"steps": 10}, Params: map[string]Param{"w": {Name: "w"}}}, ts)
	if err != nil {
		f.Fatal(err)
	}
	js, _ := os.ReadFile(p)
	st, _ := os.ReadFile(filepath.Join(dir, "ckpt-00000007.safetensors"))
	sum := sha256.Sum256(st)
	f.Add(bytes.ReplaceAll(js, []byte(hex.EncodeToString(sum[:])), []byte(shaMark)), st)
	f.Add(js, st)
	f.Add([]byte(`{"format":1,"step":7,"tensors":"ckpt-00000007.safetensors"}`), []byte{})
	want := Want{ParamsHash: "abc", Tensors: map[string]ir.Type{"w": ir.T(tensor.F32, 2, 3),
		"optim.step": ir.T(tensor.F64)}}
	f.Fuzz(func(t *testing.T, js, st []byte) {
		dir := t.TempDir()
		sum := sha256.Sum256(st)
		js = bytes.ReplaceAll(js, []byte(shaMark), []byte(hex.EncodeToString(sum[:])))
		p := filepath.Join(dir, "ckpt-00000007.json")
		os.WriteFile(p, js, 0o644)
		os.WriteFile(filepath.Join(dir, "ckpt-00000007.safetensors"), st, 0o644)
		for _, w := range []Want{{}, want} {
			c, err := Load(p, w)
			if err != nil {
				continue
			}
			if c.Meta.Step != 7 || c.Tensors[OptimPrefix+"step"].F[0] != 7 {
				t.Fatalf("loaded an inconsistent checkpoint: step %d", c.Meta.Step)
			}
			for name, x := range c.Tensors {
				if n, _ := tensor.Numel(x.Shape); n == 0 {
					t.Fatalf("loaded an empty tensor %q", name)
				}
			}
		}
	})
}
