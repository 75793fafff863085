package report

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/lcc-dev/lcc/passes"
)

// RoPELines are the report's `rope` lines for what rescale-rope did: the base
// found and the one used, the scaling, and the frequencies (the first three and
// the last two of D/2, with their range) that the tables or vectors now hold.
func RoPELines(r passes.RoPEResult) []string {
	g := func(x float64) string { return strconv.FormatFloat(x, 'g', 6, 64) }
	head := fmt.Sprintf("base %s → %s, scaling %s", g(r.FoundBase), g(r.Theta), r.Scaling)
	if r.Base != r.Theta {
		head += fmt.Sprintf(" (base %s)", g(r.Base))
	}
	if r.Orig > 0 {
		head += fmt.Sprintf(", original length %s of %d positions", g(r.Orig), r.Tokens)
	}
	if r.AttentionFactor != 1 {
		head += fmt.Sprintf(", cos and sin ×%s", g(r.AttentionFactor))
	}
	what := map[string]string{"tables": "cos/sin table pair(s)", "frequencies": "inv_freq vector(s)"}[r.Form]
	head += fmt.Sprintf("; rotary dim %d, %d %s rewritten", r.Dim, r.Sites, what)
	var shown []string
	inv := r.InvFreq
	lo, hi := inv[0], inv[0]
	for i, x := range inv {
		lo, hi = min(lo, x), max(hi, x)
		if i < 3 || i >= len(inv)-2 {
			shown = append(shown, g(x))
		} else if i == 3 {
			shown = append(shown, "…")
		}
	}
	freqs := fmt.Sprintf("inv_freq[%d] %s (min %s, max %s)", len(inv), strings.Join(shown, ", "), g(lo), g(hi))
	return []string{head, freqs}
}
