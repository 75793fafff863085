package plot

import (
	"fmt"
	"image/color"

	gplot "gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// MemorySeries is a step's planned memory for Memory: the bytes live in the
// arena during each launch of the schedule, and what the GPU holds beside them
// throughout (optimizer state and fixed costs).
type MemorySeries struct {
	Live []int64
	// Beside is added to every point of Live.
	Beside int64
	// PeakBytes is the planned per-GPU peak (arena size + Beside), drawn as a
	// dashed line; MeasuredBytes, when positive, the measured peak, drawn as a
	// line of its own.
	PeakBytes, MeasuredBytes int64
}

// legend names what each line of the plot is: the planned memory at each
// launch, the planned peak and the measured peak (the last "" without one).
// Every figure is a total per GPU, not the arena alone.
func (s MemorySeries) legend() [3]string {
	gib := func(b int64) float64 { return float64(b) / (1 << 30) }
	l := [3]string{"planned at each launch: live arena buffers + optimizer state + fixed costs",
		fmt.Sprintf("planned peak %.2f GiB: arena + optimizer state + fixed costs", gib(s.PeakBytes)), ""}
	if s.MeasuredBytes > 0 {
		l[2] = fmt.Sprintf("measured peak %.2f GiB: device memory lcc train used", gib(s.MeasuredBytes))
	}
	return l
}

// Memory draws s against the launch index, in GiB, with a title, to path
// (.png, .svg or .pdf).
func Memory(path, title string, s MemorySeries) error {
	if err := CheckFormat(path); err != nil {
		return fmt.Errorf("memory plot %w", err)
	}
	if len(s.Live) == 0 {
		return fmt.Errorf("memory plot %s: the schedule has no launches", path)
	}
	gib := func(b int64) float64 { return float64(b) / (1 << 30) }
	pts := make(plotter.XYs, len(s.Live))
	top := max(s.PeakBytes, s.MeasuredBytes)
	for i, b := range s.Live {
		pts[i] = plotter.XY{X: float64(i), Y: gib(b + s.Beside)}
		top = max(top, b+s.Beside)
	}
	p := gplot.New()
	p.Title.Text = title
	p.X.Label.Text = "launch (step's schedule)"
	p.Y.Label.Text = "GiB per GPU"
	p.Y.Min, p.Y.Max = 0, gib(top)*1.25 // room for the legend above the lines
	p.Add(plotter.NewGrid())
	line, err := plotter.NewLine(pts)
	if err != nil {
		return fmt.Errorf("memory plot %s: %w", path, err)
	}
	p.Add(line)
	labels := s.legend()
	p.Legend.Add(labels[0], line)
	p.Legend.Top = true
	hline := func(y float64, c color.Color, dashed bool, label string) error {
		l, err := plotter.NewLine(plotter.XYs{{X: 0, Y: y}, {X: float64(len(s.Live) - 1), Y: y}})
		if err != nil {
			return err
		}
		l.Color = c
		if dashed {
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		}
		p.Add(l)
		p.Legend.Add(label, l)
		return nil
	}
	if err := hline(gib(s.PeakBytes), color.RGBA{B: 200, A: 255}, true, labels[1]); err != nil {
		return fmt.Errorf("memory plot %s: %w", path, err)
	}
	if s.MeasuredBytes > 0 {
		if err := hline(gib(s.MeasuredBytes), color.RGBA{R: 200, A: 255}, false, labels[2]); err != nil {
			return fmt.Errorf("memory plot %s: %w", path, err)
		}
	}
	if err := p.Save(20*vg.Centimeter, 12*vg.Centimeter, path); err != nil {
		return fmt.Errorf("memory plot %s: %w", path, err)
	}
	return nil
}
