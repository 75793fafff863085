package exec

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	codegen "github.com/lcc-dev/lcc/codegen/cuda"
	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/runtime/cuda"
	"github.com/lcc-dev/lcc/tensor"
)

// Bound is a function of a Session whose parameters stay on the device between
// runs: Bind uploads every parameter's value once, and each Step uploads only
// the inputs it is given and downloads only the scalars it is asked for. The
// trained weights in its arena are what an Optimizer updates in place, so a
// training loop moves only its token batch up and its loss down.
type Bound struct {
	s *Session
	f *ir.Func
	r *runner
}

// Device is the session's GPU.
func (s *Session) Device() *cuda.Device { return s.dev }

// Bind builds f in the session (as Run does) and uploads its parameters: the
// tensor of inputs where given, else the parameter's Data; parameters with
// neither are inputs that every Step must feed. A parameter that a step of f
// writes cannot stay resident and is refused, naming it.
func (s *Session) Bind(f *ir.Func, inputs map[string]*tensor.Tensor) (*Bound, error) {
	r, err := s.begin(f)
	if err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	if r == nil {
		prog, err := s.program(f)
		if err != nil {
			return nil, err
		}
		if r, err = s.build(f, prog); err != nil {
			return nil, err
		}
	}
	host := map[int]binding{}
	for i, p := range f.Params {
		t := inputs[p.Name]
		if t == nil {
			t = p.Data
		}
		if t == nil {
			continue
		}
		if err := checkBinding(p, t); err != nil {
			return nil, fmt.Errorf("exec: func @%s: %w", f.Name, err)
		}
		if r.written[i] {
			return nil, fmt.Errorf("exec: func @%s: parameter %q is written by a step of the program, "+
				"so it cannot stay resident", f.Name, p.Name)
		}
		host[i] = binding{t: t, input: true}
	}
	for id, t := range r.plan.Constants {
		host[id] = binding{t, false}
	}
	clear(r.resident)
	if err := r.upload(host, false); err != nil {
		return nil, err
	}
	return &Bound{s: s, f: f, r: r}, nil
}

// checkBinding checks t's dtype and shape against parameter p.
func checkBinding(p *ir.Param, t *tensor.Tensor) error {
	want := p.Value.Type
	if t.DType != want.DType || !slices.Equal(t.Shape, want.Shape) {
		return fmt.Errorf("parameter %q: expected %v%s, got %v%s", p.Name, want.DType,
			tensor.ShapeString(want.Shape), t.DType, tensor.ShapeString(t.Shape))
	}
	return nil
}

// Buffer returns the device address and the plan's buffer of parameter or
// output name of the bound function (a parameter first).
func (b *Bound) Buffer(name string) (cuda.DevicePtr, codegen.Buffer, error) {
	id := -1
	for i, p := range b.f.Params {
		if p.Name == name {
			id = i
		}
	}
	if id < 0 {
		for _, o := range b.r.plan.Outputs {
			if o.Name == name {
				id = o.ID
			}
		}
	}
	if id < 0 {
		return 0, codegen.Buffer{}, fmt.Errorf("exec: func @%s has no parameter or output %q", b.f.Name, name)
	}
	buf := b.r.plan.Buffers[id]
	if buf.Kind == "alias" {
		buf.ID = buf.AliasOf
	}
	if b.r.offs[buf.ID] < 0 {
		return 0, codegen.Buffer{}, fmt.Errorf("exec: func @%s: %q (buffer %%%d, %s) has no device memory",
			b.f.Name, name, id, buf.Kind)
	}
	return b.r.ptr(id), b.r.plan.Buffers[id], nil
}

// Step uploads inputs (each a parameter of the function), launches the plan and
// returns the named one-element outputs as float64 numbers, read straight from
// their storage bytes. Nothing else crosses between host and device.
func (b *Bound) Step(inputs map[string]*tensor.Tensor, scalars ...string) ([]float64, error) {
	s := b.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	host := map[int]binding{}
	for name, t := range inputs {
		i := slices.IndexFunc(b.f.Params, func(p *ir.Param) bool { return p.Name == name })
		if i < 0 {
			return nil, fmt.Errorf("exec: func @%s: unknown input %q (not a parameter)", b.f.Name, name)
		}
		if err := checkBinding(b.f.Params[i], t); err != nil {
			return nil, fmt.Errorf("exec: func @%s: %w", b.f.Name, err)
		}
		host[i] = binding{t: t, input: true}
	}
	for id, t := range b.r.plan.Constants {
		host[id] = binding{t, false}
	}
	if err := b.r.upload(host, true); err != nil {
		return nil, err
	}
	if err := b.r.boundLaunch(b.f); err != nil {
		return nil, err
	}
	out := make([]float64, len(scalars))
	for i, name := range scalars {
		p, buf, err := b.Buffer(name)
		if err != nil {
			return nil, err
		}
		if n := shapeElems(buf.Shape); n != 1 {
			return nil, fmt.Errorf("exec: func @%s: %q has %d elements, not one", b.f.Name, name, n)
		}
		raw := make([]byte, buf.Bytes)
		if err := cuda.CopyDtoH(s.dev, raw, p); err != nil {
			return nil, fmt.Errorf("exec: downloading %q: %w", name, err)
		}
		if out[i], err = scalarOf(buf.DType, raw); err != nil {
			return nil, fmt.Errorf("exec: %q: %w", name, err)
		}
	}
	return out, nil
}

// shapeElems is the element count of shape.
func shapeElems(shape []int64) int64 {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	return n
}

// scalarOf decodes one element of storage dtype dt.
func scalarOf(dt string, raw []byte) (float64, error) {
	switch dt {
	case "f32":
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(raw))), nil
	case "bf16":
		return float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(raw)) << 16)), nil
	case "f64":
		return math.Float64frombits(binary.LittleEndian.Uint64(raw)), nil
	}
	return 0, fmt.Errorf("a scalar stored as %s, want f32, bf16 or f64", dt)
}

// AdamWStep holds one AdamW step's scalars, computed on the host in fp64 and
// rounded to fp32 as train/optim's update function casts them.
type AdamWStep struct {
	Decay, OneMinusBeta1, Beta2, OneMinusBeta2, Bc2Sqrt, Eps, StepSize float32
}
