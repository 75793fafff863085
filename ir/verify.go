package ir

import (
	"fmt"

	"github.com/lcc-dev/lcc/tensor"
)

// Verify checks f's invariants: unique parameter and output names, every argument
// defined before its use within f, result links consistent, attributes of the
// declared kinds, and every result type equal to what the op infers. Messages name
// the node and value, in the manner of Go's ssa.checkFunc.
func Verify(f *Func) error {
	defined := make(map[*Value]bool, len(f.Params)+len(f.Body))
	names := make(map[string]bool, len(f.Params))
	for i, p := range f.Params {
		if p.Name == "" {
			return fmt.Errorf("func @%s: parameter %d has no name", f.Name, i)
		}
		if names[p.Name] {
			return fmt.Errorf("func @%s: parameter %q declared twice", f.Name, p.Name)
		}
		names[p.Name] = true
		if p.Value == nil || p.Value.Param != p || p.Value.Def != nil {
			return fmt.Errorf("func @%s: parameter %q has a broken value link", f.Name, p.Name)
		}
		if err := checkType(p.Value.Type); err != nil {
			return fmt.Errorf("func @%s: parameter %q: %w", f.Name, p.Name, err)
		}
		if p.Data != nil && !T(p.Data.DType, p.Data.Shape...).Equal(p.Value.Type) {
			return fmt.Errorf("func @%s: parameter %q has type %v but data %v%s",
				f.Name, p.Name, p.Value.Type, p.Data.DType, tensor.ShapeString(p.Data.Shape))
		}
		defined[p.Value] = true
	}
	for i, n := range f.Body {
		where := func() string { return fmt.Sprintf("func @%s: node %d (%s)", f.Name, i, n.Where()) }
		if n == nil {
			return fmt.Errorf("func @%s: node %d is nil", f.Name, i)
		}
		for j, a := range n.Args {
			if a == nil {
				return fmt.Errorf("%s: arg %d is nil", where(), j)
			}
			if !defined[a] {
				return fmt.Errorf("%s: arg %d is not defined before its use", where(), j)
			}
		}
		types, err := inferNode(n)
		if err != nil {
			return fmt.Errorf("func @%s: node %d: %w", f.Name, i, err)
		}
		if len(types) != len(n.Results) {
			return fmt.Errorf("%s has %d results, expected %d", where(), len(n.Results), len(types))
		}
		for j, r := range n.Results {
			if r == nil || r.Def != n || r.Index != j || r.Param != nil {
				return fmt.Errorf("%s: result %d has a broken definition link", where(), j)
			}
			if defined[r] {
				return fmt.Errorf("%s: result %d is defined twice", where(), j)
			}
			if !r.Type.Equal(types[j]) {
				return fmt.Errorf("%s: result %d has type %v, expected %v", where(), j, r.Type, types[j])
			}
			defined[r] = true
		}
	}
	outNames := make(map[string]bool)
	for _, o := range f.Outputs {
		if outNames[o.Name] {
			return fmt.Errorf("func @%s: output %q declared twice", f.Name, o.Name)
		}
		outNames[o.Name] = true
		if o.Value == nil || !defined[o.Value] {
			return fmt.Errorf("func @%s: output %q is not defined", f.Name, o.Name)
		}
	}
	return nil
}

func checkType(t Type) error {
	if t.DType == tensor.Invalid || t.DType.Size() == 0 {
		return fmt.Errorf("invalid dtype")
	}
	if t.Labels != nil && len(t.Labels) != len(t.Shape) {
		return fmt.Errorf("type %v has %d labels for %d dims", t, len(t.Labels), len(t.Shape))
	}
	_, err := ShapeNumel(t.Shape)
	return err
}
