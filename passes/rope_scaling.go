package passes

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// This file holds what --rope-theta and --rope-scaling mean: the inverse
// frequencies of rotary position embeddings (RoPE, arXiv 2104.09864) for a base and
// one of Hugging Face's rope_scaling kinds, as transformers' modeling_rope_utils.py
// computes them (`_compute_*_parameters`, in float32). rope_rewrite.go finds a
// model's frequencies and puts these in their place.

// RoPEScaling is a rope_scaling entry: Kind "" (none), linear, ntk, dynamic, yarn
// or llama3, with its factor and the pretraining length Orig (0: the compiled
// sequence length over Factor, the length the model is extended from).
type RoPEScaling struct {
	Kind   string
	Factor float64
	Orig   float64
	// Low and High are llama3's low_freq_factor and high_freq_factor (1 and 4
	// when not given, Meta's values).
	Low, High float64
}

// RoPEScalingKinds names the kinds --rope-scaling takes.
const RoPEScalingKinds = "linear:F, ntk:F, dynamic:F[,orig=L], yarn:F[,orig=L] or llama3:F[,low=1,high=4,orig=L]"

// ParseRoPEScaling reads --rope-scaling: "" or none, or KIND:F[,key=value...].
func ParseRoPEScaling(s string) (RoPEScaling, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "none" {
		return RoPEScaling{}, nil
	}
	bad := func(why string) (RoPEScaling, error) {
		return RoPEScaling{}, fmt.Errorf("--rope-scaling %q: %s (want %s)", s, why, RoPEScalingKinds)
	}
	kind, rest, _ := strings.Cut(s, ":")
	parts := strings.Split(rest, ",")
	f, err := strconv.ParseFloat(parts[0], 64)
	if err != nil || !(f >= 1) || math.IsInf(f, 0) {
		return bad("the factor F must be a number >= 1")
	}
	c := RoPEScaling{Kind: kind, Factor: f}
	keys := map[string][]string{"linear": nil, "ntk": nil, "dynamic": {"orig"}, "yarn": {"orig"},
		"llama3": {"low", "high", "orig"}}
	allowed, ok := keys[kind]
	if !ok {
		return bad(fmt.Sprintf("no kind %q", kind))
	}
	for _, kv := range parts[1:] {
		k, v, _ := strings.Cut(kv, "=")
		x, err := strconv.ParseFloat(v, 64)
		if err != nil || !(x > 0) || math.IsInf(x, 0) {
			return bad(fmt.Sprintf("%s=%s: want a positive number", k, v))
		}
		switch {
		case !slices.Contains(allowed, k):
			return bad(fmt.Sprintf("%s takes no %q", kind, k))
		case k == "orig":
			c.Orig = x
		case k == "low":
			c.Low = x
		case k == "high":
			c.High = x
		}
	}
	if kind == "llama3" {
		c.Low, c.High = orDefault(c.Low, 1), orDefault(c.High, 4)
		if c.High <= c.Low {
			return bad(fmt.Sprintf("high=%g must exceed low=%g", c.High, c.Low))
		}
	}
	return c, nil
}

func orDefault(x, d float64) float64 {
	if x == 0 {
		return d
	}
	return x
}

// String is the flag's text: ParseRoPEScaling(c.String()) == c.
func (c RoPEScaling) String() string {
	if c.Kind == "" {
		return "none"
	}
	s := c.Kind + ":" + num(c.Factor)
	if c.Kind == "llama3" {
		s += ",low=" + num(c.Low) + ",high=" + num(c.High)
	}
	if c.Orig > 0 {
		s += ",orig=" + num(c.Orig)
	}
	return s
}

// num prints a float the way the flag parser reads it back, shortest first.
func num(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }

// RoPEConfig configures rescale-rope: the new base (0 keeps the model's) and the
// scaling.
type RoPEConfig struct {
	Theta   float64
	Scaling RoPEScaling
}

// Active says whether the flags ask for a rewrite at all.
func (c RoPEConfig) Active() bool { return c.Theta != 0 || c.Scaling.Kind != "" }

// String is the pass's configuration as `lcc passes --pipeline` prints it.
func (c RoPEConfig) String() string {
	return "theta=" + num(c.Theta) + " scaling=" + c.Scaling.String()
}

// Validate checks the flags alone, before a model is read.
func (c RoPEConfig) Validate() error {
	if c.Theta < 0 || math.IsNaN(c.Theta) || math.IsInf(c.Theta, 0) || (c.Theta > 0 && c.Theta <= 1) {
		return fmt.Errorf("--rope-theta %g: want a base above 1 (10000 is RoPE's)", c.Theta)
	}
	if c.Scaling.Kind != "" {
		if _, err := ParseRoPEScaling(c.Scaling.String()); err != nil {
			return err
		}
	}
	return nil
}

// ropeFreqs are the inverse frequencies of a rewrite and the factor that
// multiplies cos and sin (YaRN's attention factor; 1 otherwise).
type ropeFreqs struct {
	base   float64 // the base the frequencies start from (after ntk or dynamic's change)
	inv    []float64
	attn   float64
	orig   float64 // the pretraining length used (yarn, llama3, dynamic)
	tokens int64   // the sequence length the tables cover
}

// f32 rounds to float32, as PyTorch computes the frequencies.
func f32(x float64) float64 { return float64(float32(x)) }

// defaultInvFreq is transformers' 1 / base^(arange(0, dim, 2).float() / dim) in float32.
func defaultInvFreq(base float64, dim int) []float64 {
	inv := make([]float64, dim/2)
	for i := range inv {
		e := f32(f32(float64(2*i)) / f32(float64(dim)))
		inv[i] = f32(1 / f32(math.Pow(base, e)))
	}
	return inv
}

// freqs computes c's frequencies for a head dim dim whose tables cover tokens
// positions; base is the model's own where c gives no theta.
func (c RoPEConfig) freqs(base float64, dim int, tokens int64) ropeFreqs {
	if c.Theta != 0 {
		base = c.Theta
	}
	s := c.Scaling
	r := ropeFreqs{base: base, attn: 1, tokens: tokens}
	orig := s.Orig
	if orig == 0 && s.Factor > 0 {
		orig = float64(tokens) / s.Factor
	}
	d := float64(dim)
	switch s.Kind {
	case "":
		r.inv = defaultInvFreq(base, dim)
	case "linear": // _compute_linear_scaling_rope_parameters: inv_freq / factor
		r.inv = defaultInvFreq(base, dim)
		for i := range r.inv {
			r.inv[i] = f32(r.inv[i] / f32(s.Factor))
		}
	case "ntk": // static NTK-aware base change (transformers 4's _compute_ntk_parameters)
		r.base = base * math.Pow(s.Factor, d/(d-2))
		r.inv = defaultInvFreq(r.base, dim)
	case "dynamic": // _compute_dynamic_ntk_parameters at seq_len = tokens
		r.orig = orig
		seq := math.Max(float64(tokens), orig)
		r.base = base * math.Pow(s.Factor*seq/orig-(s.Factor-1), d/(d-2))
		r.inv = defaultInvFreq(r.base, dim)
	case "yarn":
		r.orig = orig
		r.inv, r.attn = yarn(base, dim, s.Factor, orig)
	case "llama3":
		r.orig = orig
		r.inv = llama3(base, dim, s.Factor, s.Low, s.High, orig)
	default:
		panic("lcc: BUG: rope scaling kind " + s.Kind)
	}
	return r
}

// yarn is _compute_yarn_parameters (transformers 5: truncate, beta_fast 32,
// beta_slow 1, attention_factor 0.1·ln(factor) + 1) for factor and the
// pretraining length orig.
func yarn(base float64, dim int, factor, orig float64) ([]float64, float64) {
	d := float64(dim)
	corr := func(rot float64) float64 { return d * math.Log(orig/(rot*2*math.Pi)) / (2 * math.Log(base)) }
	low := math.Max(math.Floor(corr(32)), 0)
	high := math.Min(math.Ceil(corr(1)), d-1)
	if low == high {
		high += 0.001 // transformers' guard against a zero-width ramp
	}
	inv := make([]float64, dim/2)
	for i := range inv {
		pos := f32(math.Pow(base, f32(f32(float64(2*i))/f32(d))))
		extra, inter := f32(1/pos), f32(1/f32(factor*pos))
		ramp := f32(math.Min(math.Max((float64(i)-low)/(high-low), 0), 1))
		keep := f32(1 - ramp) // inv_freq_extrapolation_factor
		inv[i] = f32(f32(inter*f32(1-keep)) + f32(extra*keep))
	}
	attn := 1.0
	if factor > 1 {
		attn = 0.1*math.Log(factor) + 1
	}
	return inv, attn
}

// llama3 is _compute_llama3_parameters: wavelengths longer than orig/low are
// divided by factor, shorter than orig/high kept, and those between smoothed.
func llama3(base float64, dim int, factor, low, high, orig float64) []float64 {
	inv := defaultInvFreq(base, dim)
	lowWave, highWave := orig/low, orig/high
	for i, f := range inv {
		wave := 2 * math.Pi / f
		g := f
		if wave > lowWave {
			g = f / factor
		}
		if !(wave < highWave) && !(wave > lowWave) {
			smooth := (orig/wave - low) / (high - low)
			g = (1-smooth)*g/factor + smooth*g
		}
		inv[i] = f32(g)
	}
	return inv
}
