package chart

import (
	"bytes"
	"fmt"
	"image/png"
	"math"
	"strings"
	"testing"

	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// lab converts a color to CIELAB (D65).
func lab(i int) [3]float64 {
	c := palette[i]
	lin := func(v uint8) float64 {
		x := float64(v) / 255
		if x <= 0.04045 {
			return x / 12.92
		}
		return math.Pow((x+0.055)/1.055, 2.4)
	}
	r, g, b := lin(c.R), lin(c.G), lin(c.B)
	x := (r*0.4124 + g*0.3576 + b*0.1805) / 0.95047
	y := r*0.2126 + g*0.7152 + b*0.0722
	z := (r*0.0193 + g*0.1192 + b*0.9505) / 1.08883
	f := func(t float64) float64 {
		if t > 0.008856 {
			return math.Cbrt(t)
		}
		return 7.787*t + 16.0/116
	}
	return [3]float64{116*f(y) - 16, 500 * (f(x) - f(y)), 200 * (f(y) - f(z))}
}

// TestPaletteSeparates16: every two of the 16 colors are at least 25 apart
// in CIELAB (the incast plot's senders 1 and 8 once shared a color), and
// every color is readable on white (lightness 20..80).
func TestPaletteSeparates16(t *testing.T) {
	if Colors != 16 {
		t.Fatalf("%d colors", Colors)
	}
	for i := 0; i < Colors; i++ {
		li := lab(i)
		if li[0] < 20 || li[0] > 80 {
			t.Errorf("color %d lightness %.0f", i, li[0])
		}
		for j := i + 1; j < Colors; j++ {
			lj := lab(j)
			if d := math.Sqrt((li[0]-lj[0])*(li[0]-lj[0]) + (li[1]-lj[1])*(li[1]-lj[1]) + (li[2]-lj[2])*(li[2]-lj[2])); d < 25 {
				t.Errorf("colors %d and %d only %.1f apart", i, j, d)
			}
		}
	}
	if Dashes(3) != nil || Dashes(16) == nil || fmt.Sprint(Dashes(16)) == fmt.Sprint(Dashes(32)) {
		t.Error("the second and third rounds of 16 series must be dashed differently")
	}
}

func lineChart(t *testing.T, series int) *Chart {
	t.Helper()
	c := New("test", "x", "y")
	for i := 0; i < series; i++ {
		xys := plotter.XYs{{X: 0, Y: float64(i)}, {X: 100, Y: 100}} // every line ends top right
		if _, err := c.Line(i, fmt.Sprintf("series %d", i), xys); err != nil {
			t.Fatal(err)
		}
	}
	c.Pad(0)
	return c
}

// TestLegendBesideTheData: the legend's columns lie right of the data
// area, never over it, also with more series than fit (the rest are
// counted).
func TestLegendBesideTheData(t *testing.T) {
	for _, n := range []int{1, 8, 16, 40, 200} {
		c := lineChart(t, n)
		img := vgimg.New(vg.Length(WidthPx)*vg.Inch/dpi, vg.Length(HeightPx)*vg.Inch/dpi)
		dc := draw.New(img)
		area, cols := c.layout(dc)
		data := c.Plot.DataCanvas(area)
		if len(cols) == 0 || len(cols) > 3 {
			t.Fatalf("%d series: %d legend columns", n, len(cols))
		}
		for _, col := range cols {
			if col.area.Min.X < data.Max.X {
				t.Errorf("%d series: legend column at x=%v overlaps the data (right edge %v)", n, col.area.Min.X, data.Max.X)
			}
		}
		if data.Max.X-data.Min.X < 0.6*(dc.Max.X-dc.Min.X) {
			t.Errorf("%d series: the data got only %v of %v", n, data.Max.X-data.Min.X, dc.Max.X-dc.Min.X)
		}
	}
	// Past what fits, the last row counts the rest.
	c := lineChart(t, 200)
	var buf bytes.Buffer
	if err := c.Write(&buf, "svg", 0, 0); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "more") {
		t.Error("200 series: no '... N more' in the legend")
	}
}

// TestPadKeepsCurvesOffTheFrame: after Pad, the largest value sits below
// the top of the y axis.
func TestPadKeepsCurvesOffTheFrame(t *testing.T) {
	c := lineChart(t, 3)
	if c.Plot.Y.Max <= 100 || c.Plot.Y.Min != 0 {
		t.Errorf("y axis %v..%v for data 0..100", c.Plot.Y.Min, c.Plot.Y.Max)
	}
}

// TestSizes: PNG is 1200x750 pixels by default; SVG is written too.
func TestSizes(t *testing.T) {
	c := lineChart(t, 4)
	var buf bytes.Buffer
	if err := c.Write(&buf, "png", 0, 0); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != 1200 || b.Dy() != 750 {
		t.Errorf("PNG %dx%d, want 1200x750", b.Dx(), b.Dy())
	}
	dir := t.TempDir()
	files, err := c.Save(dir + "/fig")
	if err != nil || len(files) != 2 || !strings.HasSuffix(files[0], "fig.png") || !strings.HasSuffix(files[1], "fig.svg") {
		t.Errorf("Save: %v %v", files, err)
	}
	if err := c.Write(&buf, "gif", 0, 0); err == nil {
		t.Error("gif accepted")
	}
}
