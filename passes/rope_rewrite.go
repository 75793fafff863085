package passes

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/lcc-dev/lcc/ir"
	"github.com/lcc-dev/lcc/tensor"
)

// RescaleRoPE (rescale-rope) gives a model's rotary position embeddings a new
// base and scaling (rope_scaling.go). It finds the frequencies by structure, in
// either form an ONNX export takes once imported:
//
//   - computed at run time: a constant vector of D/2 values base^(-2i/D)
//     (inv_freq) whose products with the positions reach both a cos and a sin.
//     The vector is replaced; YaRN's attention factor multiplies the cos and sin.
//   - folded at import: constant cos and sin tables [T, W] (any unit axes around
//     them) whose row p holds cos(p·base^(-2i/D)) and sin of the same, W = D with
//     the halves repeated (Hugging Face's cat(freqs, freqs)) or W = D/2. Both tables
//     are recomputed from the new frequencies, for the same T positions.
//
// The base and D are read back from the values and the whole vector or table is
// checked against them, so a constant that merely looks like one is not taken.
// Every site must give the same base and D; a model with none, or with two
// different RoPEs, is refused.
func RescaleRoPE(f *ir.Func, c RoPEConfig) (RoPEResult, error) {
	if !c.Active() {
		return RoPEResult{}, nil
	}
	sites := append(runtimeSites(f), foldedSites(f)...)
	if len(sites) == 0 {
		return RoPEResult{}, fmt.Errorf("%s: found no rotary position embedding: looked for a constant "+
			"vector of D/2 inverse frequencies base^(-2i/D) whose products with the positions reach a cos "+
			"and a sin, and for constant cos and sin tables [T, D] (or [T, D/2]) holding cos(p·base^(-2i/D)) "+
			"and sin(p·base^(-2i/D))", c.flags())
	}
	s0 := sites[0]
	tokens := int64(0)
	for _, s := range sites {
		if s.dim != s0.dim || math.Abs(s.base-s0.base) > 1e-5*s0.base {
			return RoPEResult{}, fmt.Errorf("%s: the model has two different rotary embeddings, %s and "+
				"%s; lcc rewrites a model with one", c.flags(), s0, s)
		}
		tokens = max(tokens, s.tokens)
	}
	fr := c.freqs(s0.base, s0.dim, tokens)
	res := RoPEResult{Form: s0.form(), Sites: len(sites), FoundBase: s0.base, Dim: s0.dim,
		Theta: orDefault(c.Theta, s0.base), Scaling: c.Scaling.String(), Base: fr.base, Orig: fr.orig,
		Tokens: tokens, AttentionFactor: fr.attn, InvFreq: fr.inv}
	scale := map[*ir.Node]bool{}
	for _, s := range sites {
		if s.table {
			s.rewriteTables(fr)
			continue
		}
		t := s.freq.AttrTensor("value")
		s.freq.Attrs = s.freq.Attrs.With("value", tensor.FromFloats(t.DType, t.Shape, fr.inv))
		if fr.attn != 1 {
			for _, n := range append(s.cos, s.sin...) {
				scale[n] = true
			}
		}
	}
	scaleResults(f, scale, fr.attn)
	return res, nil
}

// RoPEResult is what rescale-rope found and put in its place, for the report.
type RoPEResult struct {
	// Form is "tables" (cos and sin folded at import) or "frequencies" (inv_freq,
	// with cos and sin computed at run time); Sites counts the rewritten tables
	// or vectors.
	Form  string `json:"form"`
	Sites int    `json:"sites"`
	// FoundBase and Dim are the model's base and rotary dim as read back.
	FoundBase float64 `json:"found_base"`
	Dim       int     `json:"rotary_dim"`
	// Theta is the base used (--rope-theta, or the model's), Scaling the
	// --rope-scaling, Base the base after ntk's or dynamic's change of it, Orig
	// the pretraining length used (yarn, llama3, dynamic) and Tokens the
	// positions the tables cover.
	Theta   float64 `json:"theta"`
	Scaling string  `json:"scaling"`
	Base    float64 `json:"base"`
	Orig    float64 `json:"orig,omitempty"`
	Tokens  int64   `json:"tokens"`
	// AttentionFactor multiplies cos and sin (YaRN's mscale; 1 otherwise).
	AttentionFactor float64 `json:"attention_factor"`
	// InvFreq are the D/2 inverse frequencies used, in float32.
	InvFreq []float64 `json:"inv_freq"`
}

// RescaleRoPEPass is RescaleRoPE as a pass, for pipelines that keep no findings.
func RescaleRoPEPass(c RoPEConfig) Pass {
	return Pass{Name: "rescale-rope", Config: c.String(),
		Doc: "give rotary position embeddings a new base and scaling (--rope-theta, --rope-scaling)",
		Run: func(f *ir.Func) error { _, err := RescaleRoPE(f, c); return err }}
}

var _ = RegisterConfigurable(RescaleRoPEPass(RoPEConfig{}), func(a *Args) (Pass, error) {
	var c RoPEConfig
	if _, err := fmt.Sscan(a.String("theta", "0"), &c.Theta); err != nil {
		return Pass{}, fmt.Errorf("pass rescale-rope: option theta: want a number")
	}
	s, err := ParseRoPEScaling(a.String("scaling", "none"))
	if err != nil {
		return Pass{}, err
	}
	c.Scaling = s
	return RescaleRoPEPass(c), c.Validate()
})

// flags names the flags of c, for errors.
func (c RoPEConfig) flags() string {
	var fs []string
	if c.Theta != 0 {
		fs = append(fs, "--rope-theta="+num(c.Theta))
	}
	if c.Scaling.Kind != "" {
		fs = append(fs, "--rope-scaling="+c.Scaling.String())
	}
	return strings.Join(fs, " ")
}

// ropeSite is one place a model's RoPE frequencies live.
type ropeSite struct {
	table bool
	// freq is the inv_freq constant and cos, sin the nodes it reaches (run
	// time); or freq is nil and cos, sin hold the two table constants (folded).
	freq     *ir.Node
	cos, sin []*ir.Node
	base     float64
	dim      int
	tokens   int64
}

func (s ropeSite) form() string {
	if s.table {
		return "tables"
	}
	return "frequencies"
}

func (s ropeSite) String() string {
	n := s.freq
	if s.table {
		n = s.cos[0]
	}
	return fmt.Sprintf("base %s, rotary dim %d (%s %s)", num(s.base), s.dim, s.form(), n.Where())
}

// rotaryOps are the ops between inv_freq and its cos and sin: the outer product
// with the positions and the layout changes around it.
var rotaryOps = map[ir.Op]bool{ir.OpMul: true, ir.OpMatMul: true, ir.OpTranspose: true,
	ir.OpReshape: true, ir.OpConcat: true, ir.OpExpand: true, ir.OpCast: true}

// runtimeSites finds inv_freq constants whose products reach a cos and a sin.
func runtimeSites(f *ir.Func) []ropeSite {
	uses := f.Uses()
	var out []ropeSite
	for _, n := range f.Body {
		if n.Op != ir.OpConstant {
			continue
		}
		t := n.AttrTensor("value")
		if t == nil || !t.DType.IsFloat() || len(nonUnit(t.Shape)) != 1 {
			continue
		}
		base, dim, ok := geometric(t.F)
		if !ok {
			continue
		}
		s := ropeSite{freq: n, base: base, dim: dim}
		// Walk forward to the cos and sin; the first product says how many
		// positions there are.
		seen := map[*ir.Value]bool{}
		frontier := []*ir.Value{n.Result()}
		for depth := 0; depth < 8 && len(frontier) > 0; depth++ {
			var next []*ir.Value
			for _, v := range frontier {
				for _, u := range uses[v] {
					switch {
					case u.Op == ir.OpCos:
						s.cos = append(s.cos, u)
					case u.Op == ir.OpSin:
						s.sin = append(s.sin, u)
					case rotaryOps[u.Op] && !seen[u.Results[0]]:
						if s.tokens == 0 && (u.Op == ir.OpMul || u.Op == ir.OpMatMul) {
							s.tokens = positions(u.Results[0].Type.Shape, int64(len(t.F)))
						}
						seen[u.Results[0]] = true
						next = append(next, u.Results[0])
					}
				}
			}
			frontier = next
		}
		if len(s.cos) > 0 && len(s.sin) > 0 {
			out = append(out, s)
		}
	}
	return out
}

// positions is the largest dim of an outer product's shape once the D/2 axis of
// size half is set aside: the number of positions.
func positions(shape []int64, half int64) int64 {
	var best int64
	skipped := false
	for _, d := range shape {
		if d == half && !skipped {
			skipped = true
			continue
		}
		best = max(best, d)
	}
	return best
}

// nonUnit lists the axes of shape longer than 1.
func nonUnit(shape []int64) []int {
	var axes []int
	for i, d := range shape {
		if d != 1 {
			axes = append(axes, i)
		}
	}
	return axes
}

// geometric reads v as inv_freq: v[i] = base^(-2i/D) with D = 2·len(v), each
// within float32's rounding of transformers' computation. The base is read from
// the last (most precise relative to the power) value, then rounded to six
// significant digits when the vector still fits it (10000, not 10000.0003).
func geometric(v []float64) (float64, int, bool) {
	n := len(v)
	if n < 2 || math.Abs(v[0]-1) > 4e-6 || !(v[n-1] > 0 && v[n-1] < 1) {
		return 0, 0, false
	}
	dim := 2 * n
	base := math.Pow(v[n-1], -float64(dim)/float64(2*(n-1)))
	if r, err := roundSig(base, 6); err == nil && fits(v, r, dim) {
		return r, dim, true
	}
	return base, dim, fits(v, base, dim)
}

func fits(v []float64, base float64, dim int) bool {
	for i, x := range v {
		want := math.Pow(base, -2*float64(i)/float64(dim))
		if math.Abs(x-want) > 4e-6*want {
			return false
		}
	}
	return true
}

// roundSig rounds x to digits significant digits.
func roundSig(x float64, digits int) (float64, error) {
	var r float64
	_, err := fmt.Sscan(fmt.Sprintf("%.*g", digits, x), &r)
	return r, err
}

// foldedSites finds pairs of constant cos and sin tables.
func foldedSites(f *ir.Func) []ropeSite {
	type table struct {
		n    *ir.Node
		t    *tensor.Tensor
		T, W int
	}
	var coss, sins []table
	for _, n := range f.Body {
		if n.Op != ir.OpConstant {
			continue
		}
		t := n.AttrTensor("value")
		if t == nil || !t.DType.IsFloat() {
			continue
		}
		axes := nonUnit(t.Shape)
		if len(axes) != 2 || axes[1] != len(t.Shape)-1 {
			continue
		}
		tb := table{n: n, t: t, T: int(t.Shape[axes[0]]), W: int(t.Shape[axes[1]])}
		if row0(t.F, tb.W, 1) {
			coss = append(coss, tb)
		} else if row0(t.F, tb.W, 0) {
			sins = append(sins, tb)
		}
	}
	var out []ropeSite
	used := map[*ir.Node]bool{}
	for _, c := range coss {
		for _, s := range sins {
			if used[s.n] || !slices.Equal(c.t.Shape, s.t.Shape) {
				continue
			}
			site, ok := tablePair(c.t.F, s.t.F, c.T, c.W)
			if !ok {
				continue
			}
			site.cos, site.sin = []*ir.Node{c.n}, []*ir.Node{s.n}
			used[s.n] = true
			out = append(out, site)
			break
		}
	}
	return out
}

// row0 says whether the first row of a [T, W] table is all v.
func row0(x []float64, w int, v float64) bool {
	for _, y := range x[:w] {
		if y != v {
			return false
		}
	}
	return len(x) >= 2*w
}

// tablePair reads a cos table c and a sin table s ([T, W], row-major) as RoPE's:
// the angles of row 1 are the inverse frequencies (repeated twice across W, or
// once), and every entry must be cos or sin of p times them, as float32 makes them.
func tablePair(c, s []float64, T, W int) (ropeSite, bool) {
	w := make([]float64, W)
	for j := range w {
		w[j] = math.Atan2(s[W+j], c[W+j])
	}
	half, dim := W, 2*W
	if W%2 == 0 {
		dup := true
		for j := 0; j < W/2; j++ {
			dup = dup && c[W+j] == c[W+j+W/2] && s[W+j] == s[W+j+W/2]
		}
		if dup {
			half, dim = W/2, W
		}
	}
	base, _, ok := geometric(w[:half])
	if !ok {
		return ropeSite{}, false
	}
	inv := defaultInvFreq(base, dim)
	for p := 0; p < T; p++ {
		for j := 0; j < W; j++ {
			a := f32(inv[j%half] * float64(p))
			tol := 1e-5 + 1e-6*a // float32's rounding of the angle grows with p
			k := p*W + j
			if math.Abs(c[k]-math.Cos(a)) > tol || math.Abs(s[k]-math.Sin(a)) > tol {
				return ropeSite{}, false
			}
		}
	}
	return ropeSite{table: true, base: base, dim: dim, tokens: int64(T)}, true
}

// rewriteTables recomputes a folded site's cos and sin tables from fr, for the
// same positions 0..T-1, as transformers does in float32: cos(inv·p)·factor.
func (s ropeSite) rewriteTables(fr ropeFreqs) {
	for k, n := range []*ir.Node{s.cos[0], s.sin[0]} {
		t := n.AttrTensor("value")
		axes := nonUnit(t.Shape)
		W := int(t.Shape[axes[1]])
		data := make([]float64, len(t.F))
		for i := range data {
			p, j := i/W, i%W
			a := f32(fr.inv[j%len(fr.inv)] * float64(p))
			v := math.Cos(a)
			if k == 1 {
				v = math.Sin(a)
			}
			data[i] = f32(f32(v) * f32(fr.attn))
		}
		n.Attrs = n.Attrs.With("value", tensor.FromFloats(t.DType, t.Shape, data))
	}
}

// scaleResults multiplies the result of each node in scale by factor, for every
// reader after it.
func scaleResults(f *ir.Func, scale map[*ir.Node]bool, factor float64) {
	if len(scale) == 0 {
		return
	}
	repl := map[*ir.Value]*ir.Value{}
	body := make([]*ir.Node, 0, len(f.Body)+2*len(scale))
	for _, n := range f.Body {
		for i, a := range n.Args {
			if r, ok := repl[a]; ok {
				n.Args[i] = r
			}
		}
		body = append(body, n)
		if !scale[n] {
			continue
		}
		x := n.Result()
		c := &ir.Node{Op: ir.OpConstant, Attrs: ir.A("value", tensor.Scalar(x.Type.DType, factor)), Name: n.Name}
		c.Results = []*ir.Value{{Type: ir.T(x.Type.DType), Def: c}}
		m := &ir.Node{Op: ir.OpMul, Args: []*ir.Value{x, c.Results[0]}, Name: n.Name}
		m.Results = []*ir.Value{{Type: x.Type, Def: m}}
		body = append(body, c, m)
		repl[x] = m.Results[0]
	}
	f.Body = body
	for i, o := range f.Outputs {
		if r, ok := repl[o.Value]; ok {
			f.Outputs[i].Value = r
		}
	}
}
