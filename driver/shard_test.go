package driver

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/passes"
	"github.com/lcc-dev/lcc/safetensors"
)

const td = "../testdata"

// prepared loads a model bound to a reference's shapes and runs Prepare.
func prepared(t *testing.T, model, refName string, a AttentionOptions) (*ir.Func, *safetensors.File, string) {
	t.Helper()
	refPath := filepath.Join(td, "ref", refName)
	ref, shapes, err := ReadRef(refPath)
	if err != nil {
		t.Fatal(err)
	}
	f, err := Load(filepath.Join(td, "onnx", model), Bindings{InputShapes: shapes})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Prepare(f, a, passes.Options{VerifyEach: true}); err != nil {
		t.Fatal(err)
	}
	return f, ref, refPath
}

func TestShardedAttnMHARing(t *testing.T) {
	for _, mode := range []string{"ring", "ulysses"} {
		for _, n := range []int{2, 4} {
			f, ref, refPath := prepared(t, "attn_mha.onnx", "attn_mha_dense.ref.safetensors", AttentionOptions{})
			var out bytes.Buffer
			_, err := CheckSharded(f, ref, refPath, ShardOptions{Ranks: n, Mode: mode, Grads: true},
				CheckOptions{Tolerance: 1e-4, Out: &out})
			t.Logf("%s N=%d\n%s", mode, n, out.String())
			if err != nil {
				t.Fatal(err)
			}
		}
	}
}
