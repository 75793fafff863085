package ir

import (
	"fmt"
	"slices"
	"strings"

	"github.com/lcc-dev/lcc/tensor"
)

// Bind resolves every parameter of f to a tensor: inputs[name] where given (and
// not nil), else the parameter's Data. It is the one rule of the CPU
// interpreter and the GPU executor, so both refuse the same calls with the same
// message. given[i] says Params[i]'s tensor came from inputs, which a caller may
// refill between runs. valid, when set, is a further check of a tensor of the
// right type (the interpreter's: its storage matches its shape).
//
// The error lists every problem at once, missing, unknown (a name that is no
// parameter) and mistyped inputs, so one failed run says all that is wrong.
func (f *Func) Bind(inputs map[string]*tensor.Tensor,
	valid func(*tensor.Tensor) bool) (ts []*tensor.Tensor, given []bool, err error) {
	var missing, unknown, bad []string
	for name := range inputs {
		if f.Param(name) == nil {
			unknown = append(unknown, fmt.Sprintf("%q", name))
		}
	}
	ts, given = make([]*tensor.Tensor, len(f.Params)), make([]bool, len(f.Params))
	for i, p := range f.Params {
		t := inputs[p.Name]
		given[i] = t != nil
		if t == nil {
			t = p.Data
		}
		if t == nil {
			missing = append(missing, fmt.Sprintf("%q", p.Name))
			continue
		}
		want := p.Value.Type
		if t.DType != want.DType || !slices.Equal(t.Shape, want.Shape) || valid != nil && !valid(t) {
			bad = append(bad, fmt.Sprintf("parameter %q: expected %v%s, got %v%s", p.Name,
				want.DType, tensor.ShapeString(want.Shape), t.DType, tensor.ShapeString(t.Shape)))
			continue
		}
		ts[i] = t
	}
	slices.Sort(unknown) // map order must not reach the message
	var msgs []string
	if len(missing) > 0 {
		msgs = append(msgs, "missing inputs "+strings.Join(missing, ", "))
	}
	if len(unknown) > 0 {
		msgs = append(msgs, "unknown inputs "+strings.Join(unknown, ", ")+" (not parameters)")
	}
	msgs = append(msgs, bad...)
	if len(msgs) > 0 {
		return nil, nil, fmt.Errorf("func @%s: %s", f.Name, strings.Join(msgs, "; "))
	}
	return ts, given, nil
}
