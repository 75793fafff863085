package ir

import (
	"testing"

	"github.com/lcc-dev/lcc/tensor"
)

// TestBind: inputs override Data, and one error lists every missing, unknown
// (sorted) and mistyped input.
func TestBind(t *testing.T) {
	f := &Func{Name: "f"}
	for _, name := range []string{"a", "b", "c"} {
		f.AddParam(name, RoleInput, T(tensor.F32, 2), nil)
	}
	f.Params[1].Data = tensor.New(tensor.F32, 2)
	a := tensor.New(tensor.F32, 2)
	ts, given, err := f.Bind(map[string]*tensor.Tensor{"a": a, "c": a}, nil)
	if err != nil || ts[0] != a || ts[1] != f.Params[1].Data || !given[0] || given[1] || !given[2] {
		t.Fatalf("Bind = %v, %v, %v", ts, given, err)
	}
	_, _, err = f.Bind(map[string]*tensor.Tensor{"a": tensor.New(tensor.F32, 3), "z": a, "y": a}, nil)
	want := `func @f: missing inputs "c"; unknown inputs "y", "z" (not parameters); ` +
		`parameter "a": expected f32[2], got f32[3]`
	if err == nil || err.Error() != want {
		t.Fatalf("Bind = %v\nwant %s", err, want)
	}
	refuse := func(*tensor.Tensor) bool { return false }
	if _, _, err := f.Bind(map[string]*tensor.Tensor{"a": a, "c": a}, refuse); err == nil {
		t.Fatal("Bind passed tensors valid refused")
	}
}
