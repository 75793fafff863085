package plot

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"strings"

	gplot "gonum.org/v1/plot"
	"gonum.org/v1/plot/palette"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Grid is a table of scores in [0, 1] to draw as a heat map: Scores[r][c] is
// the score of column c (labelled Cols[c]) and row r (Rows[r]); NaN is none.
type Grid struct {
	Cols, Rows []string
	Scores     [][]float64
	// XLabel and YLabel name the axes.
	XLabel, YLabel string
}

// Dims, Z, X and Y make g a plotter.GridXYZ: cells sit at integer
// coordinates, row 0 drawn at the top.
func (g Grid) Dims() (c, r int)   { return len(g.Cols), len(g.Rows) }
func (g Grid) Z(c, r int) float64 { return g.Scores[r][c] }
func (g Grid) X(c int) float64    { return float64(c) }
func (g Grid) Y(r int) float64    { return float64(-r) }
func (g Grid) check(path string) error {
	if len(g.Cols) == 0 || len(g.Rows) == 0 || len(g.Scores) != len(g.Rows) {
		return fmt.Errorf("%s: a heat map needs rows and columns (%d rows of scores for %d labels)", path,
			len(g.Scores), len(g.Rows))
	}
	for r, row := range g.Scores {
		if len(row) != len(g.Cols) {
			return fmt.Errorf("%s: row %d has %d scores for %d columns", path, r, len(row), len(g.Cols))
		}
	}
	return nil
}

// scorePalette runs from red (0) through yellow to green (1), the colours of
// the needle-in-a-haystack heat maps (Kamradt's LLMTest_NeedleInAHaystack:
// #F0496E, #EBB839, #0CD79F).
type scorePalette struct{}

var scoreStops = [3]color.RGBA{{0xF0, 0x49, 0x6E, 0xff}, {0xEB, 0xB8, 0x39, 0xff}, {0x0C, 0xD7, 0x9F, 0xff}}

// Colors interpolates the stops linearly in 101 steps: one per percent.
func (scorePalette) Colors() []color.Color {
	out := make([]color.Color, 101)
	for i := range out {
		v := float64(i) / 100
		a, b, f := scoreStops[0], scoreStops[1], 2*v
		if v > 0.5 {
			a, b, f = scoreStops[1], scoreStops[2], 2*v-1
		}
		mix := func(x, y uint8) uint8 { return uint8(math.Round(float64(x) + f*(float64(y)-float64(x)))) }
		out[i] = color.RGBA{mix(a.R, b.R), mix(a.G, b.G), mix(a.B, b.B), 0xff}
	}
	return out
}

// labelTicks puts labels at the integer positions 0, -1, ... (sign -1, rows)
// or 0, 1, ... (sign 1, columns).
func labelTicks(labels []string, sign float64) gplot.ConstantTicks {
	ticks := make(gplot.ConstantTicks, len(labels))
	for i, l := range labels {
		ticks[i] = gplot.Tick{Value: sign * float64(i), Label: l}
	}
	return ticks
}

// Heatmap draws g to path (.png, .svg or .pdf) as the needle-in-a-haystack
// plots are drawn: columns left to right, rows top to bottom, each cell
// coloured by its score, red 0 to green 1, with a colour bar and a title.
func Heatmap(path, title string, g Grid) error {
	if err := CheckFormat(path); err != nil {
		return err
	}
	if err := g.check(path); err != nil {
		return err
	}
	p := gplot.New()
	p.Title.Text = title
	p.X.Label.Text, p.Y.Label.Text = g.XLabel, g.YLabel
	h := plotter.NewHeatMap(g, scorePalette{})
	h.Min, h.Max, h.NaN = 0, 1, color.Gray{0xcc}
	p.Add(h)
	// Each cell's score written in it, as the heat maps of the papers do.
	var xy plotter.XYLabels
	for r, row := range g.Scores {
		for c, v := range row {
			if !math.IsNaN(v) {
				xy.XYs = append(xy.XYs, plotter.XY{X: float64(c), Y: float64(-r)})
				xy.Labels = append(xy.Labels, fmt.Sprintf("%.2f", v))
			}
		}
	}
	if len(xy.Labels) > 0 {
		labels, err := plotter.NewLabels(xy)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		for i := range labels.TextStyle {
			labels.TextStyle[i].XAlign, labels.TextStyle[i].YAlign = draw.XCenter, draw.YCenter
		}
		p.Add(labels)
	}
	p.X.Tick.Marker = labelTicks(g.Cols, 1)
	p.Y.Tick.Marker = labelTicks(g.Rows, -1)
	p.X.Min, p.X.Max = -0.5, float64(len(g.Cols))-0.5
	p.Y.Min, p.Y.Max = -float64(len(g.Rows))+0.5, 0.5

	bar := gplot.New()
	bar.Title.Text = "score"
	bh := plotter.NewHeatMap(barGrid{}, scorePalette{})
	bh.Min, bh.Max = 0, 1
	bar.Add(bh)
	bar.HideX()
	bar.Y.Min, bar.Y.Max = 0, 1
	bar.Y.Tick.Marker = gplot.ConstantTicks{{Value: 0, Label: "0"}, {Value: 0.25, Label: "0.25"},
		{Value: 0.5, Label: "0.5"}, {Value: 0.75, Label: "0.75"}, {Value: 1, Label: "1"}}

	w, ht := 6*vg.Inch, 4*vg.Inch
	barW := 0.9 * vg.Inch
	c, err := draw.NewFormattedCanvas(w, ht, strings.TrimPrefix(strings.ToLower(filepath.Ext(path)), "."))
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	dc := draw.New(c)
	p.Draw(draw.Crop(dc, 0, -barW, 0, 0))
	bar.Draw(draw.Crop(dc, w-barW+0.1*vg.Inch, 0, 0.3*vg.Inch, 0))
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	return f.Close()
}

// barGrid is the colour bar: one column of 101 cells from 0 to 1.
type barGrid struct{}

func (barGrid) Dims() (c, r int)   { return 1, 101 }
func (barGrid) Z(_, r int) float64 { return float64(r) / 100 }
func (barGrid) X(int) float64      { return 0 }
func (barGrid) Y(r int) float64    { return float64(r) / 100 }

var _ palette.Palette = scorePalette{}
