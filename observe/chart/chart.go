// Package chart draws mrlab's figures in one house style: a palette that
// keeps 16 series apart, the legend beside the data rather than over it,
// axes padded so no curve touches the frame, and 1200x750 PNG by default
// with SVG alongside. The experiments' figures and sim's --plot-dir
// telemetry plots both draw through it.
package chart

import (
	"fmt"
	"image/color"
	"io"
	"os"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Default figure size in pixels (PNG at 96 dpi; SVG at the same size in
// points times 0.75).
const (
	WidthPx  = 1200
	HeightPx = 750
	dpi      = 96
)

// palette holds 16 colors readable on white and apart from one another
// (every pair at least 25 apart in CIELAB, checked by a test): the
// colorblind-safe Okabe-Ito colors first, then eight more.
var palette = [...]color.RGBA{
	{0x00, 0x72, 0xB2, 0xff}, // blue
	{0xD5, 0x5E, 0x00, 0xff}, // vermillion
	{0x00, 0x9E, 0x73, 0xff}, // bluish green
	{0xCC, 0x79, 0xA7, 0xff}, // reddish purple
	{0xE6, 0x9F, 0x00, 0xff}, // orange
	{0x56, 0xB4, 0xE9, 0xff}, // sky blue
	{0x33, 0x33, 0x33, 0xff}, // near black
	{0x94, 0x00, 0xD3, 0xff}, // violet
	{0x9A, 0xCD, 0x32, 0xff}, // yellow green
	{0xFF, 0x14, 0x93, 0xff}, // pink
	{0x6A, 0x3D, 0x9A, 0xff}, // purple
	{0x80, 0x00, 0x00, 0xff}, // maroon
	{0x99, 0x99, 0x99, 0xff}, // gray
	{0x55, 0x6B, 0x2F, 0xff}, // olive
	{0x8C, 0x56, 0x4B, 0xff}, // brown
	{0x00, 0xCE, 0xD1, 0xff}, // turquoise
}

// Colors is how many series the palette tells apart by color alone.
const Colors = len(palette)

// Color returns series i's color; past Colors the colors repeat, with
// Dashes telling the rounds apart.
func Color(i int) color.Color { return palette[((i%Colors)+Colors)%Colors] }

// Dashes returns series i's dash pattern: solid for the first Colors
// series, then a different dash for each further round.
func Dashes(i int) []vg.Length {
	switch (i / Colors) % 4 {
	case 1:
		return []vg.Length{vg.Points(6), vg.Points(3)}
	case 2:
		return []vg.Length{vg.Points(2), vg.Points(2)}
	case 3:
		return []vg.Length{vg.Points(8), vg.Points(3), vg.Points(2), vg.Points(3)}
	}
	return nil
}

// plainTicks are gonum's default ticks labelled with as few digits as they
// need ("250", not "250.00").
type plainTicks struct{}

// Ticks implements plot.Ticker.
func (plainTicks) Ticks(min, max float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(min, max)
	for i := range ticks {
		if ticks[i].Label != "" {
			ticks[i].Label = strconv.FormatFloat(ticks[i].Value, 'g', 6, 64)
		}
	}
	return ticks
}

// Chart is a plot with its legend kept apart, to be drawn beside the data.
type Chart struct {
	Plot   *plot.Plot
	legend []entry
	// MaxLegend bounds the legend entries shown (0: 48); past it the last
	// row says how many more series there are.
	MaxLegend int
}

type entry struct {
	name   string
	thumbs []plot.Thumbnailer
}

// New returns a chart with a title, axis labels, a light grid and the
// house fonts.
func New(title, xlabel, ylabel string) *Chart {
	p := plot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font.Size = vg.Points(16)
	p.Title.Padding = vg.Points(8)
	p.X.Label.Text, p.Y.Label.Text = xlabel, ylabel
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		a.Label.TextStyle.Font.Size = vg.Points(13)
		a.Tick.Label.Font.Size = vg.Points(11)
		a.Tick.Marker = plainTicks{}
	}
	g := plotter.NewGrid()
	g.Vertical.Color = color.Gray{Y: 225}
	g.Horizontal.Color = color.Gray{Y: 225}
	p.Add(g)
	return &Chart{Plot: p}
}

// Line adds a line in series i's color and dashes, named in the legend if
// name is not empty, and returns it for further styling.
func (c *Chart) Line(i int, name string, xys plotter.XYer) (*plotter.Line, error) {
	l, err := plotter.NewLine(xys)
	if err != nil {
		return nil, fmt.Errorf("chart %q: line %q: %w", c.Plot.Title.Text, name, err)
	}
	l.Color = Color(i)
	l.Width = vg.Points(1.5)
	l.Dashes = Dashes(i)
	c.Plot.Add(l)
	if name != "" {
		c.AddLegend(name, l)
	}
	return l, nil
}

// AddLegend adds a legend entry.
func (c *Chart) AddLegend(name string, thumbs ...plot.Thumbnailer) {
	c.legend = append(c.legend, entry{name, thumbs})
}

// Pad widens the axes by a fraction of their span (5% when 0) on each side
// where data could touch the frame: a curve along the top of a fixed
// range, or at 0, stays visible. Call it after adding the data.
func (c *Chart) Pad(frac float64) {
	if frac <= 0 {
		frac = 0.05
	}
	p := c.Plot
	if span := p.Y.Max - p.Y.Min; span > 0 {
		p.Y.Max += frac * span
		if p.Y.Min != 0 {
			p.Y.Min -= frac * span
		}
	}
}

// Write draws the chart as "png" or "svg" at w x h pixels (0 for the
// default 1200x750), the legend in a column to the right of the data.
func (c *Chart) Write(out io.Writer, format string, w, h int) error {
	if w <= 0 || h <= 0 {
		w, h = WidthPx, HeightPx
	}
	if format != "png" && format != "svg" {
		return fmt.Errorf("chart %q: format %q (want png or svg)", c.Plot.Title.Text, format)
	}
	wd, ht := vg.Length(w)*vg.Inch/dpi, vg.Length(h)*vg.Inch/dpi
	cv, err := draw.NewFormattedCanvas(wd, ht, format)
	if err != nil {
		return fmt.Errorf("chart %q: %w", c.Plot.Title.Text, err)
	}
	dc := draw.New(cv)
	// White background, also in SVG.
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	plotArea, cols := c.layout(dc)
	c.Plot.Draw(plotArea)
	for _, col := range cols {
		col.legend.Draw(col.area)
	}
	if _, err := cv.WriteTo(out); err != nil {
		return fmt.Errorf("chart %q: writing %s: %w", c.Plot.Title.Text, format, err)
	}
	return nil
}

// layout splits the canvas into the plot's area and the legend's columns
// to its right.
func (c *Chart) layout(dc draw.Canvas) (draw.Canvas, []legendCol) {
	cols := c.legendColumns(dc.Max.Y - dc.Min.Y)
	var legendW vg.Length
	for _, l := range cols {
		legendW += l.width + vg.Points(10)
	}
	plotArea := draw.Crop(dc, 0, -legendW, 0, 0)
	x := plotArea.Max.X + vg.Points(6)
	// The legend's top is the data area's top (below the title).
	top := plotArea.Max.Y - c.titleHeight()
	for i := range cols {
		cols[i].area = draw.Canvas{Canvas: dc.Canvas, Rectangle: vg.Rectangle{
			Min: vg.Point{X: x, Y: dc.Min.Y}, Max: vg.Point{X: x + cols[i].width, Y: top}}}
		x += cols[i].width + vg.Points(10)
	}
	return plotArea, cols
}

func (c *Chart) titleHeight() vg.Length {
	if c.Plot.Title.Text == "" {
		return 0
	}
	return c.Plot.Title.TextStyle.Height(c.Plot.Title.Text) + c.Plot.Title.Padding
}

// legendCol is one column of the legend.
type legendCol struct {
	legend plot.Legend
	width  vg.Length
	area   draw.Canvas
}

// legendColumns lays the entries out in columns that fit the height,
// at most three; what does not fit is counted in a last row.
func (c *Chart) legendColumns(ht vg.Length) []legendCol {
	if len(c.legend) == 0 {
		return nil
	}
	style := plot.NewLegend()
	style.TextStyle.Font = font.From(style.TextStyle.Font, vg.Points(11))
	style.Top, style.Left = true, true
	style.ThumbnailWidth = vg.Points(22)
	rowH := style.TextStyle.Height("Xg") + vg.Points(2)
	perCol := max(1, int((ht-c.titleHeight()-vg.Points(40))/rowH))
	maxShown := c.MaxLegend
	if maxShown <= 0 {
		maxShown = 48
	}
	maxShown = min(maxShown, 3*perCol)
	entries := c.legend
	more := 0
	if len(entries) > maxShown {
		more = len(entries) - (maxShown - 1)
		entries = entries[:maxShown-1]
	}
	var cols []legendCol
	for start := 0; start < len(entries) || (more > 0 && start == len(entries)); start += perCol {
		end := min(start+perCol, len(entries))
		l := style
		var width vg.Length
		for _, e := range entries[start:end] {
			l.Add(e.name, e.thumbs...)
			width = max(width, l.ThumbnailWidth+l.TextStyle.Width(" "+e.name))
		}
		if more > 0 && end == len(entries) {
			note := fmt.Sprintf("... %d more", more)
			l.Add(note)
			width = max(width, l.ThumbnailWidth+l.TextStyle.Width(" "+note))
		}
		cols = append(cols, legendCol{legend: l, width: width})
		if end == len(entries) {
			break
		}
	}
	return cols
}

// Save writes the chart to base.png and base.svg (or the formats given)
// and returns the files written.
func (c *Chart) Save(base string, formats ...string) ([]string, error) {
	if len(formats) == 0 {
		formats = []string{"png", "svg"}
	}
	var files []string
	for _, f := range formats {
		path := strings.TrimSuffix(base, "."+f) + "." + f
		out, err := os.Create(path)
		if err != nil {
			return files, fmt.Errorf("chart: %w", err)
		}
		err = c.Write(out, f, 0, 0)
		if cerr := out.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("chart: %w", cerr)
		}
		if err != nil {
			return files, err
		}
		files = append(files, path)
	}
	return files, nil
}
