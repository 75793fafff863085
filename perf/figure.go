package perf

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Figure is one measured quantity of a workload: a phase ("fwd", "fwdbwd", "bwd",
// "step") with its median time and, when the workload counts FLOPs, its rate.
type Figure struct {
	Phase  string
	Ms     float64
	TFLOPs float64 // 0: not counted
}

// Result is what one workload measured: who ran it ("lcc", or an anchor's name)
// and its figures.
type Result struct {
	Who     string
	Figures []Figure
	Note    string // e.g. the kernel configuration, or an anchor's error
}

// Figure returns the figure of phase and whether r has it.
func (r Result) Figure(phase string) (Figure, bool) {
	for _, f := range r.Figures {
		if f.Phase == phase {
			return f, true
		}
	}
	return Figure{}, false
}

// AnchorResult converts an anchor row with the fields PHASE_ms and, optionally,
// PHASE_tflops for each of phases. A row with an "error" keeps it as Note.
func AnchorResult(row AnchorRow, phases ...string) Result {
	r := Result{Who: row.Name(), Note: row.Err()}
	for _, p := range phases {
		ms, ok := row.Float(p + "_ms")
		if !ok {
			continue
		}
		tf, _ := row.Float(p + "_tflops")
		r.Figures = append(r.Figures, Figure{Phase: p, Ms: ms, TFLOPs: tf})
	}
	return r
}

// Compare prints one line per result and phase, and for every anchor the ratio of
// its time to lcc's (above 1: lcc is faster), which is also lcc's rate over the
// anchor's at equal FLOP counts. lcc is the first result.
func Compare(w io.Writer, title string, lcc Result, anchors []Result, phases ...string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, title)
	fmt.Fprintln(tw, "who\tphase\tms\tTFLOP/s\tanchor/lcc time\t")
	all := append([]Result{lcc}, anchors...)
	for _, r := range all {
		for _, p := range phases {
			f, ok := r.Figure(p)
			if !ok {
				continue
			}
			ratio := ""
			if r.Who != lcc.Who {
				if l, ok := lcc.Figure(p); ok && l.Ms > 0 {
					ratio = fmt.Sprintf("%.3f", f.Ms/l.Ms)
				}
			}
			tf := ""
			if f.TFLOPs > 0 {
				tf = fmt.Sprintf("%.1f", f.TFLOPs)
			}
			fmt.Fprintf(tw, "%s\t%s\t%.3f\t%s\t%s\t\n", r.Who, p, f.Ms, tf, ratio)
		}
		if r.Note != "" && len(r.Figures) == 0 {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t%s\t\n", r.Who, strings.ReplaceAll(r.Note, "\t", " "))
		}
	}
	return tw.Flush()
}
