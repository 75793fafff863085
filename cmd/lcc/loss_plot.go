package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/lcc-dev/lcc/internal/userfile"
	"github.com/lcc-dev/lcc/train"
	"github.com/lcc-dev/lcc/train/plot"
)

// plotLoss draws the run's loss to path. A resumed run draws every step from
// its --metrics file, which holds the steps before the resume too, so the curve
// is the whole run's; without one it draws its own steps, and says so.
func plotLoss(path string, cfg train.Config, res *train.Result, log io.Writer) error {
	// A fresh run's own losses are every step already; only a resumed one (first > 0)
	// is missing the steps before its resume.
	first, losses := res.FirstStep, res.Losses
	if first > 0 && cfg.Metrics != "" {
		// Only a metrics file that covers every step replaces the run's own losses; a
		// partial one (edited, or from another run) would draw a curve with gaps or lies.
		if all, ok := metricsLosses(cfg.Metrics, res.Step); ok {
			first, losses = 0, all
		}
	}
	// A note, not an error: the plot of this part is still worth drawing.
	if first > 0 {
		fmt.Fprintf(log, "lcc: note: --plot draws steps %d..%d, this part of the run (with --metrics, "+
			"a resumed run draws every step)\n", first+1, res.Step)
	}
	// The program hash in the title ties a plot to the exact compiled step.
	title := fmt.Sprintf("%s: loss (program %.19s…)", filepath.Base(cfg.Model), res.Program)
	// checkOutputFile found the folder creatable before the run.
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("--plot %s: %w", path, err)
	}
	return plot.Loss(path, title, first, losses)
}

// metricsLosses reads the loss of steps 1..last from a --metrics file, when it
// holds each of them once, in order (a null loss reads as NaN).
func metricsLosses(path string, last int) ([]float64, bool) {
	data, err := userfile.ReadFile(path) // a pipe or a device as --metrics: nothing to read back
	if err != nil {
		return nil, false
	}
	var out []float64
	for line := range strings.Lines(string(data)) {
		var m struct {
			Step int      `json:"step"`
			Loss *float64 `json:"loss"`
		}
		// Any gap, repeat or foreign line means the file is not this run's history:
		// give up and let the caller draw what it holds in memory.
		if json.Unmarshal([]byte(line), &m) != nil || m.Step != len(out)+1 {
			return nil, false
		}
		// A diverged step writes a null loss (JSON has no NaN); keep its place in the curve.
		l := math.NaN()
		if m.Loss != nil {
			l = *m.Loss
		}
		out = append(out, l)
	}
	return out, len(out) == last
}
