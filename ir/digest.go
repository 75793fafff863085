package ir

import (
	"crypto/sha256"
	"encoding/binary"
	"math"

	"github.com/lcc-dev/lcc/tensor"
)

// Digest is a sha256 of everything Print shows of f (values numbered as Print
// numbers them, so rebuilding an identical node changes nothing), computed
// without formatting text. The pass manager compares digests to say whether a
// pass changed the function: printing a 300,000-node step after every pass cost
// more than the passes.
func Digest(f *Func) [32]byte {
	d := digester{ids: make(map[*Value]uint64, len(f.Params)+len(f.Body))}
	d.str(f.Name)
	d.strs(f.Notes)
	d.strs(f.Remarks)
	d.int(int64(len(f.Params)))
	for _, p := range f.Params {
		d.def(p.Value)
		d.str(p.Name)
		d.int(int64(p.Role))
		d.bool(p.Frozen)
		d.str(p.Origin)
		d.bool(p.OriginTransposed)
		d.strs(p.Sources)
	}
	d.int(int64(len(f.Body)))
	for _, n := range f.Body {
		d.int(int64(n.Op))
		d.str(n.Name)
		d.int(int64(len(n.Args)))
		for _, a := range n.Args {
			d.use(a)
		}
		d.int(int64(len(n.Attrs)))
		for _, a := range n.Attrs {
			d.str(a.Name)
			d.attr(a.Value)
		}
		d.int(int64(len(n.Results)))
		for _, r := range n.Results {
			d.def(r)
		}
	}
	d.int(int64(len(f.Outputs)))
	for _, o := range f.Outputs {
		d.use(o.Value)
		d.str(o.Name)
	}
	return sha256.Sum256(d.buf)
}

type digester struct {
	buf []byte
	ids map[*Value]uint64
}

func (d *digester) int(v int64) { d.buf = binary.AppendVarint(d.buf, v) }
func (d *digester) float(v float64) {
	d.buf = binary.LittleEndian.AppendUint64(d.buf, math.Float64bits(v))
}

func (d *digester) bool(v bool) {
	if v {
		d.int(1)
	} else {
		d.int(0)
	}
}

func (d *digester) str(s string) {
	d.int(int64(len(s)))
	d.buf = append(d.buf, s...)
}

func (d *digester) strs(ss []string) {
	d.int(int64(len(ss)))
	for _, s := range ss {
		d.str(s)
	}
}

func (d *digester) ints(vs []int64) {
	d.int(int64(len(vs)))
	for _, v := range vs {
		d.int(v)
	}
}

// def numbers a value where it is defined and records its type.
func (d *digester) def(v *Value) {
	d.ids[v] = uint64(len(d.ids))
	d.typ(v.Type)
}

// use records a value by its number, as Print's %N; -1 for one defined nowhere.
func (d *digester) use(v *Value) {
	id, ok := d.ids[v]
	if !ok {
		d.int(-1)
		return
	}
	d.int(int64(id))
}

func (d *digester) typ(t Type) {
	d.int(int64(t.DType))
	d.ints(t.Shape)
	d.strs(t.Labels)
}

func (d *digester) attr(v any) {
	k, _ := kindOf(v)
	d.int(int64(k))
	switch v := v.(type) {
	case bool:
		d.bool(v)
	case int64:
		d.int(v)
	case []int64:
		d.ints(v)
	case float64:
		d.float(v)
	case []float64:
		d.int(int64(len(v)))
		for _, x := range v {
			d.float(x)
		}
	case string:
		d.str(v)
	case tensor.DType:
		d.int(int64(v))
	case *tensor.Tensor:
		d.int(int64(v.DType))
		d.ints(v.Shape)
		d.int(int64(len(v.F)))
		for _, x := range v.F {
			d.float(x)
		}
		d.ints(v.I)
	}
}
