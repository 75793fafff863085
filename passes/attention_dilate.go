package passes

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/lcc-dev/lcc/ir"
)

// DilateConfig is the LongNet configuration of dilate-attention (docs/design.md §3):
// branch i has segment length Segments[i] and dilation Dilations[i].
type DilateConfig struct {
	Segments, Dilations []int64
	// Offsets picks each head's offset within a dilation: "paper" (o(h) = h mod r,
	// the default when empty) or "block" (torchscale's contiguous head blocks).
	Offsets string
	// Layers, when not nil, receives the names of the layers each run rewrote.
	Layers *[]string
	// Skipped, when not nil, receives one line per layer each run left as it was,
	// naming it and saying why (a sliding window: already local).
	Skipped *[]string
}

// DefaultDilateConfig is LongNet's configuration for million-token sequences:
// w = 2048 … 32768 with r = 1 … 16, paper offsets.
var DefaultDilateConfig = DilateConfig{
	Segments:  []int64{2048, 4096, 8192, 16384, 32768},
	Dilations: []int64{1, 2, 4, 8, 16},
	Offsets:   "paper",
}

// dilateAttentionDefault makes the pass known to `lcc passes` and --print-ir-after.
var _ = RegisterConfigurable(DilateAttention(DefaultDilateConfig), func(a *Args) (Pass, error) {
	d := DefaultDilateConfig
	return DilateAttention(DilateConfig{Segments: a.Ints("segments", d.Segments),
		Dilations: a.Ints("dilations", d.Dilations), Offsets: a.String("offsets", d.Offsets)}), nil
})

// DilateAttention returns the dilate-attention pass: every `attention` op, which
// must be causal, without a mask and with as many keys as queries, becomes a
// `dilated_attention` op with the same scale and the configured branches (LongNet,
// arXiv 2307.02486). A segment longer than the sequence is one segment. The
// configuration is checked first, then every layer, and nothing is rewritten
// unless all of them can be; errors name the flag or the layer (the node name).
// A sliding-window layer (ir.Window; Mistral's, Gemma2's local layers) is skipped:
// it already attends to W keys, and dilating it would change what it computes.
// Run match-attention first, so that exported attention is an `attention` op.
func DilateAttention(cfg DilateConfig) Pass {
	return Pass{Name: "dilate-attention",
		Doc: "replace causal attention by LongNet dilated attention (--segments, --dilations)",
		Run: func(f *ir.Func) error { return dilate(f, cfg) }}
}

// Validate checks the configuration alone, with errors that name the CLI flags.
func (c DilateConfig) Validate() error {
	segs, dils := joinInts(c.Segments), joinInts(c.Dilations)
	switch {
	case len(c.Segments) == 0:
		return errors.New("--segments is empty: dilated attention needs at least one segment length")
	case len(c.Segments) != len(c.Dilations):
		return fmt.Errorf("--segments %s and --dilations %s differ in length", segs, dils)
	}
	for i := range c.Segments {
		if c.Segments[i] <= 0 {
			return fmt.Errorf("--segments %s: segment lengths must be positive", segs)
		}
		if c.Dilations[i] <= 0 {
			return fmt.Errorf("--dilations %s: dilations must be positive", dils)
		}
	}
	if o := c.Offsets; o != "" && o != "paper" && o != "block" {
		return fmt.Errorf("--dilated-offsets %q: want paper or block", o)
	}
	return nil
}

func joinInts(xs []int64) string {
	var parts []string
	for _, x := range xs {
		parts = append(parts, fmt.Sprint(x))
	}
	return strings.Join(parts, ",")
}

// dilate checks cfg and every layer, then rewrites them all.
func dilate(f *ir.Func, cfg DilateConfig) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	const need = "--attention=dilated needs causal attention without a mask"
	var errs []error
	var skipped []string
	local := map[*ir.Node]bool{} // sliding-window layers, left as they are
	for _, n := range f.Body {
		if n.Op != ir.OpAttention {
			continue
		}
		layer := n.Name
		if layer == "" {
			layer = n.Op.String()
		}
		t, s := n.Args[0].Type.Shape[1], n.Args[1].Type.Shape[1]
		switch w := ir.Window(n); {
		case w > 0:
			local[n] = true
			skipped = append(skipped, fmt.Sprintf("layer %s: sliding window %d: already local", layer, w))
		case len(n.Args) == 4:
			errs = append(errs, fmt.Errorf("layer %s: attention has a mask; %s", layer, need))
		case !n.AttrBool("causal"):
			errs = append(errs, fmt.Errorf("layer %s: attention is not causal; %s", layer, need))
		case t != s:
			errs = append(errs, fmt.Errorf("layer %s: attention has %d keys for %d queries; %s",
				layer, s, t, need))
		}
	}
	if cfg.Skipped != nil {
		*cfg.Skipped = skipped
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	offsets := cfg.Offsets
	if offsets == "" {
		offsets = "paper"
	}
	var layers []string
	patterns := []Pattern{
		// attention(q, k, v) {causal, scale}
		//   -> dilated_attention(q, k, v) {segments, dilations, offsets, causal, scale}
		{Name: "dilate", Root: ir.OpAttention, Rewrite: func(e *Editor, n *ir.Node, b *ir.Builder) bool {
			if local[n] {
				return false
			}
			attrs := ir.A("segments", slices.Clone(cfg.Segments),
				"dilations", slices.Clone(cfg.Dilations), "offsets", offsets,
				"causal", true, "scale", ir.AttentionScale(n))
			outs := b.Apply(ir.OpDilatedAttention, attrs, n.Args...)
			e.Replace(n.Results[0], outs[0])
			e.Replace(n.Results[1], outs[1])
			layers = append(layers, n.Name)
			return true
		}},
	}
	_, err := ApplyPatterns(f, patterns, 0)
	if cfg.Layers != nil {
		*cfg.Layers = layers
	}
	return err
}
