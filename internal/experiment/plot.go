package experiment

import (
	"fmt"
	"image/color"
	"io"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// figure is one plot a report draws: lines over a numeric or nominal x
// axis, or grouped bars, with optional vertical markers.
type figure struct {
	file                  string // base file name, e.g. "loss-sweep"
	title, xlabel, ylabel string
	// xticks, if set, makes the x axis nominal: x = 0..len-1 get these
	// labels (used for the uneven loss rates).
	xticks []string
	lines  []figLine
	// bars, if set, draws grouped bars over the categories in xticks.
	bars []figBars
	// vlines mark x positions (a failure) with a label.
	vlines []figMark
	// ymin/ymax fix the y range when set (ymax > ymin).
	ymin, ymax float64
	// legendLeft moves the legend to the left side.
	legendLeft, legendBottom bool
}

type figLine struct {
	name   string
	x, y   []float64
	dashed bool
	points bool
	// color: 0 picks by position, k > 0 is plotutil's palette color k-1,
	// -1 is gray.
	color int
}

type figBars struct {
	name   string
	values []float64
}

type figMark struct {
	x     float64
	label string
}

// plotSize is every figure's size.
var plotW, plotH = 16 * vg.Centimeter, 10 * vg.Centimeter

// render draws the figure as "png" or "svg" to w.
func (f *figure) render(w io.Writer, format string) error {
	p := plot.New()
	p.Title.Text = f.title
	p.X.Label.Text = f.xlabel
	p.Y.Label.Text = f.ylabel
	p.Add(plotter.NewGrid())
	p.Legend.Top = !f.legendBottom
	p.Legend.Left = f.legendLeft
	for i, l := range f.lines {
		xys := make(plotter.XYs, len(l.x))
		for k := range l.x {
			xys[k].X, xys[k].Y = l.x[k], l.y[k]
		}
		line, err := plotter.NewLine(xys)
		if err != nil {
			return fmt.Errorf("plotting %s: line %q: %w", f.file, l.name, err)
		}
		c := lineColor(l.color, i)
		line.LineStyle.Color = c
		line.LineStyle.Width = vg.Points(1.5)
		if l.dashed {
			line.LineStyle.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
		}
		p.Add(line)
		thumbs := []plot.Thumbnailer{line}
		if l.points {
			sc, err := plotter.NewScatter(xys)
			if err != nil {
				return fmt.Errorf("plotting %s: points %q: %w", f.file, l.name, err)
			}
			sc.GlyphStyle.Color = c
			sc.GlyphStyle.Shape = plotutil.Shape(i)
			sc.GlyphStyle.Radius = vg.Points(3)
			p.Add(sc)
			thumbs = append(thumbs, sc)
		}
		if l.name != "" {
			p.Legend.Add(l.name, thumbs...)
		}
	}
	if len(f.bars) > 0 {
		top := 0.0
		for _, b := range f.bars {
			for _, v := range b.values {
				top = max(top, v)
			}
		}
		if f.ymax <= f.ymin && top > 0 {
			f.ymin, f.ymax = 0, 1.25*top
		}
		w := vg.Points(80 / float64(len(f.bars)))
		for i, b := range f.bars {
			bc, err := plotter.NewBarChart(plotter.Values(b.values), w)
			if err != nil {
				return fmt.Errorf("plotting %s: bars %q: %w", f.file, b.name, err)
			}
			bc.Color = plotutil.Color(i)
			bc.LineStyle.Width = 0
			bc.Offset = vg.Length(float64(i)-float64(len(f.bars)-1)/2) * w
			p.Add(bc)
			p.Legend.Add(b.name, bc)
		}
	}
	if len(f.xticks) > 0 {
		p.NominalX(f.xticks...)
	}
	if f.ymax > f.ymin {
		p.Y.Min, p.Y.Max = f.ymin, f.ymax
	}
	for _, m := range f.vlines {
		ymin, ymax := p.Y.Min, p.Y.Max
		line, err := plotter.NewLine(plotter.XYs{{X: m.x, Y: ymin}, {X: m.x, Y: ymax}})
		if err != nil {
			return fmt.Errorf("plotting %s: marker: %w", f.file, err)
		}
		line.LineStyle.Color = color.RGBA{R: 200, A: 255}
		line.LineStyle.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
		p.Add(line)
		if m.label != "" {
			lb, err := plotter.NewLabels(plotter.XYLabels{XYs: plotter.XYs{{X: m.x, Y: ymax}}, Labels: []string{" " + m.label}})
			if err == nil {
				lb.TextStyle[0].Color = color.RGBA{R: 200, A: 255}
				lb.TextStyle[0].YAlign = draw.YTop
				p.Add(lb)
			}
		}
	}
	wt, err := p.WriterTo(plotW, plotH, format)
	if err != nil {
		return fmt.Errorf("plotting %s as %s: %w", f.file, format, err)
	}
	if _, err := wt.WriteTo(w); err != nil {
		return fmt.Errorf("plotting %s as %s: %w", f.file, format, err)
	}
	return nil
}

func lineColor(idx, i int) color.Color {
	switch {
	case idx < 0:
		return color.Gray{Y: 120}
	case idx > 0:
		return plotutil.Color(idx - 1)
	}
	return plotutil.Color(i)
}
