package experiment

import (
	"fmt"
	"image/color"
	"io"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/mrlab/mrlab/observe/chart"
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
	// legendLeft and legendBottom placed the legend over the data; the
	// legend now always sits beside it, and they are ignored.
	legendLeft, legendBottom bool
}

type figLine struct {
	name   string
	x, y   []float64
	dashed bool
	points bool
	// color: 0 picks by position, k > 0 is the palette's color k-1
	// (observe/chart), -1 is gray.
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

// render draws the figure as "png" or "svg" to w in the house style
// (observe/chart): 1200x750, legend beside the data, padded axes.
func (f *figure) render(w io.Writer, format string) error {
	c := chart.New(f.title, f.xlabel, f.ylabel)
	p := c.Plot
	dataMax, dataMin := math.Inf(-1), math.Inf(1)
	for i, l := range f.lines {
		xys := make(plotter.XYs, len(l.x))
		for k := range l.x {
			xys[k].X, xys[k].Y = l.x[k], l.y[k]
			dataMax, dataMin = max(dataMax, l.y[k]), min(dataMin, l.y[k])
		}
		line, err := plotter.NewLine(xys)
		if err != nil {
			return fmt.Errorf("plotting %s: line %q: %w", f.file, l.name, err)
		}
		col := lineColor(l.color, i)
		line.LineStyle.Color = col
		line.LineStyle.Width = vg.Points(2)
		if l.dashed {
			line.LineStyle.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
		}
		p.Add(line)
		thumbs := []plot.Thumbnailer{line}
		if l.points {
			sc, err := plotter.NewScatter(xys)
			if err != nil {
				return fmt.Errorf("plotting %s: points %q: %w", f.file, l.name, err)
			}
			sc.GlyphStyle.Color = col
			sc.GlyphStyle.Shape = plotutil.Shape(i)
			sc.GlyphStyle.Radius = vg.Points(3.5)
			p.Add(sc)
			thumbs = append(thumbs, sc)
		}
		if l.name != "" {
			c.AddLegend(l.name, thumbs...)
		}
	}
	if len(f.bars) > 0 {
		top := 0.0
		for _, b := range f.bars {
			for _, v := range b.values {
				top = max(top, v)
			}
		}
		dataMax, dataMin = max(dataMax, top), min(dataMin, 0)
		w := vg.Points(120 / float64(len(f.bars)))
		for i, b := range f.bars {
			bc, err := plotter.NewBarChart(plotter.Values(b.values), w)
			if err != nil {
				return fmt.Errorf("plotting %s: bars %q: %w", f.file, b.name, err)
			}
			bc.Color = chart.Color(i)
			bc.LineStyle.Width = 0
			bc.Offset = vg.Length(float64(i)-float64(len(f.bars)-1)/2) * w
			p.Add(bc)
			c.AddLegend(b.name, bc)
		}
	}
	if len(f.xticks) > 0 {
		p.NominalX(f.xticks...)
	}
	c.Pad(0)
	if f.ymax > f.ymin {
		// A fixed range still shows every point (an axis that cut the
		// data off once clipped the incast curves).
		p.Y.Min, p.Y.Max = min(f.ymin, dataMin), max(f.ymax, dataMax+0.03*(f.ymax-f.ymin))
	}
	for _, m := range f.vlines {
		ymin, ymax := p.Y.Min, p.Y.Max
		line, err := plotter.NewLine(plotter.XYs{{X: m.x, Y: ymin}, {X: m.x, Y: ymax}})
		if err != nil {
			return fmt.Errorf("plotting %s: marker: %w", f.file, err)
		}
		line.LineStyle.Color = markColor
		line.LineStyle.Dashes = []vg.Length{vg.Points(3), vg.Points(3)}
		p.Add(line)
		if m.label != "" {
			lb, err := plotter.NewLabels(plotter.XYLabels{XYs: plotter.XYs{{X: m.x, Y: ymax}}, Labels: []string{" " + m.label}})
			if err == nil {
				lb.TextStyle[0].Color = markColor
				lb.TextStyle[0].YAlign = draw.YTop
				lb.TextStyle[0].Font.Size = vg.Points(11)
				p.Add(lb)
			}
		}
	}
	if err := c.Write(w, format, 0, 0); err != nil {
		return fmt.Errorf("plotting %s: %w", f.file, err)
	}
	return nil
}

// markColor draws event markers (a failure), apart from the series'
// colors.
var markColor = color.RGBA{R: 200, A: 255}

// lineColor picks a line's color: idx 0 by position, k > 0 the palette's
// color k-1, -1 gray (a reference line).
func lineColor(idx, i int) color.Color {
	switch {
	case idx < 0:
		return color.Gray{Y: 120}
	case idx > 0:
		return chart.Color(idx - 1)
	}
	return chart.Color(i)
}
