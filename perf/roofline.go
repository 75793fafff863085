package perf

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/lcc-dev/lcc/runtime/exec"
	"github.com/lcc-dev/lcc/targets"
)

// The roofline of lcc train --profile puts each kernel family's measured time
// beside what it must move or compute per step (codegen.PlanWork, and the
// optimizer's own count), against the ceiling of its kind:
//   - a GEMM family does FLOPs; its ceiling is the device's bf16 GEMM rate
//     (794 TFLOP/s on an H200: targets.Target.GEMMCeiling);
//   - every other generated kernel family, the optimizer's included, moves
//     bytes; its ceiling is the copy bandwidth (4.2 TB/s: CopyCeiling) —
//     except attention, which is compute bound: its bytes are shown but no
//     share, since the FLOPs of its kernels are not counted per launch;
//   - copies to the host and collectives run on links, not HBM: no ceiling.
//
// Bytes are what the kernels' buffers span, so a family that rereads (a GEMM's
// tiles, an attention's keys) moves more than it is credited with, and its
// share is a lower bound.

// Roofline bars (issue #25): a memory-bound family that moves more than
// BigFamilyBytes per step should reach CopyShareBar of the copy bandwidth.
const (
	BigFamilyBytes = 100e6
	CopyShareBar   = 0.8
)

// RooflineRow is one family's line of the table, per step.
type RooflineRow struct {
	Family   string
	Launches float64 // per step
	Bytes    float64 // per step
	FLOPs    float64 // per step (GEMMs)
	MS       float64 // GPU time per step
	// Rate is the achieved TB/s or TFLOP/s (Unit), and Share its fraction of
	// Ceiling; Ceiling is "" for a family without one (Why says why).
	Rate    float64
	Unit    string
	Share   float64
	Ceiling string
	Why     string
	// PerParam is the optimizer pass's bytes per trained element.
	PerParam float64
}

// Roofline is the table of fams (summed over steps steps) against dev's
// ceilings, slowest family first. elements is the number of trained weight
// elements (0: no per-parameter figures).
func Roofline(fams map[string]exec.Family, steps int, dev targets.Target, elements int64) []RooflineRow {
	n := float64(max(steps, 1))
	var rows []RooflineRow
	for name, f := range fams {
		r := RooflineRow{Family: name, Launches: float64(f.Launches) / n, Bytes: float64(f.Bytes) / n,
			FLOPs: float64(f.FLOPs) / n, MS: f.Time.Seconds() * 1e3 / n}
		sec := f.Time.Seconds() / n
		switch {
		case f.Kind == "gemm":
			r.Unit, r.Ceiling = "TFLOP/s", "GEMM"
			r.Rate = r.FLOPs / max(sec, 1e-12) / 1e12
			r.Share = r.FLOPs / max(sec, 1e-12) / dev.GEMMCeiling()
		case f.Kind == "collective" || f.Kind == "d2h" || f.Kind == "h2d":
			r.Unit, r.Why = "TB/s", "runs on a link, not HBM"
			r.Rate = r.Bytes / max(sec, 1e-12) / 1e12
		case computeBound(name):
			r.Unit, r.Why = "TB/s", "compute bound (FLOPs not counted)"
			r.Rate = r.Bytes / max(sec, 1e-12) / 1e12
		default:
			r.Unit, r.Ceiling = "TB/s", "copy"
			r.Rate = r.Bytes / max(sec, 1e-12) / 1e12
			r.Share = r.Bytes / max(sec, 1e-12) / dev.CopyCeiling()
		}
		if f.Kind == "optim" && elements > 0 {
			r.PerParam = r.Bytes / float64(elements)
		}
		rows = append(rows, r)
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].MS != rows[j].MS {
			return rows[i].MS > rows[j].MS
		}
		return rows[i].Family < rows[j].Family
	})
	return rows
}

// computeBound reports whether a kernel family is attention, whose kernels
// are bound by their FLOPs, not their bytes.
func computeBound(fam string) bool {
	for _, p := range []string{"attention", "dilated", "ring_attention", "sharded_dilated"} {
		if strings.HasPrefix(fam, p) {
			return true
		}
	}
	return false
}

// WriteRoofline prints rows as lcc train --profile does, then which big
// memory-bound families miss the copy bar, and the optimizer's bytes per
// parameter against the floor of one pass over its state.
func WriteRoofline(w io.Writer, rows []RooflineRow, dev targets.Target) {
	fmt.Fprintf(w, "roofline per step on %s (ceilings: copy %.2f TB/s, bf16 GEMM %.0f TFLOP/s; launches "+
		"one by one, uncaptured):\n", dev.GPU, dev.CopyCeiling()/1e12, dev.GEMMCeiling()/1e12)
	fmt.Fprintf(w, "  %-28s %8s %14s %9s %16s  %s\n", "family", "launches", "moved/done", "ms", "achieved",
		"of ceiling")
	var slow []string
	var optimBytes, adamw float64
	for _, r := range rows {
		work := bytesString(r.Bytes)
		if r.FLOPs > 0 {
			work = flopString(r.FLOPs)
		}
		share := r.Why
		if r.Ceiling != "" {
			share = fmt.Sprintf("%5.1f%% of %s", 100*r.Share, r.Ceiling)
		}
		if r.Ceiling == "copy" && r.Bytes > BigFamilyBytes && r.Share < CopyShareBar {
			share += fmt.Sprintf(" (below %.0f%%)", 100*CopyShareBar)
			slow = append(slow, r.Family)
		}
		if r.PerParam > 0 {
			share += fmt.Sprintf("; %.1f B/param", r.PerParam)
			optimBytes += r.PerParam
			if r.Family == "optim.adamw" {
				adamw = r.PerParam
			}
		}
		fmt.Fprintf(w, "  %-28s %8.1f %14s %9.3f %8.2f %-7s  %s\n", r.Family, r.Launches, work, r.MS, r.Rate,
			r.Unit, share)
	}
	if len(slow) > 0 {
		fmt.Fprintf(w, "  memory-bound families over %s per step below %.0f%% of copy: %s\n",
			bytesString(BigFamilyBytes), 100*CopyShareBar, strings.Join(slow, ", "))
	} else {
		fmt.Fprintf(w, "  every memory-bound family over %s per step reaches %.0f%% of copy\n",
			bytesString(BigFamilyBytes), 100*CopyShareBar)
	}
	if adamw > 0 {
		fmt.Fprintf(w, "  optimizer: %.1f B/param a step; the floor is one pass over the state, %.1f B/param "+
			"(28 with bf16 weights and gradients): the norm, needed before the first update, reads the "+
			"gradients once more\n", optimBytes, adamw)
	}
}

// bytesString is n bytes in decimal units (MB, GB), as bandwidths are quoted.
func bytesString(n float64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2f GB", n/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.1f MB", n/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1f kB", n/1e3)
	}
	return fmt.Sprintf("%.0f B", n)
}

// flopString is n FLOPs in GFLOP or TFLOP.
func flopString(n float64) string {
	if n >= 1e12 {
		return fmt.Sprintf("%.2f TFLOP", n/1e12)
	}
	return fmt.Sprintf("%.1f GFLOP", n/1e9)
}
