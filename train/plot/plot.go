// Package plot draws training curves with gonum/plot: `lcc train --plot=FILE`
// writes the per-step loss of a run, so a user sees it fall without a notebook;
// `lcc compile --emit=memory` draws a step's planned memory over its schedule.
// The format follows FILE's extension (.png, .svg or .pdf).
package plot

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"

	gplot "gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// Formats are the file extensions the plots can be written as.
var Formats = []string{".png", ".svg", ".pdf"}

// CheckFormat checks that path's extension is one of Formats, so that a caller
// can refuse a bad name before the run whose curve it is to hold.
func CheckFormat(path string) error {
	if !slices.Contains(Formats, strings.ToLower(filepath.Ext(path))) {
		return fmt.Errorf("%s: want a .png, .svg or .pdf file", path)
	}
	return nil
}

// Loss draws losses (the loss of steps first+1, first+2, ...) against the
// step, with a title, to path. Steps whose loss is not finite are left out.
func Loss(path, title string, first int, losses []float64) error {
	if err := CheckFormat(path); err != nil {
		return fmt.Errorf("--plot %w", err)
	}
	var pts plotter.XYs
	for i, l := range losses {
		if !math.IsNaN(l) && !math.IsInf(l, 0) {
			pts = append(pts, plotter.XY{X: float64(first + i + 1), Y: l})
		}
	}
	if len(pts) == 0 {
		return fmt.Errorf("--plot %s: no finite loss to draw", path)
	}
	p := gplot.New()
	p.Title.Text = title
	p.X.Label.Text = "step"
	p.Y.Label.Text = "loss"
	p.Add(plotter.NewGrid())
	line, err := plotter.NewLine(pts)
	if err != nil {
		return fmt.Errorf("--plot %s: %w", path, err)
	}
	p.Add(line)
	if len(pts) == 1 {
		// One step draws no line: mark the point.
		s, err := plotter.NewScatter(pts)
		if err != nil {
			return fmt.Errorf("--plot %s: %w", path, err)
		}
		p.Add(s)
	}
	if err := p.Save(16*vg.Centimeter, 10*vg.Centimeter, path); err != nil {
		return fmt.Errorf("--plot %s: %w", path, err)
	}
	return nil
}
