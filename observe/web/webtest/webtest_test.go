package webtest

import (
	"bytes"
	"image"
	"image/color"
	"image/png"
	"testing"
)

func TestNonBlank(t *testing.T) {
	if err := NonBlank(Blank(200, 100)); err == nil {
		t.Error("a one-colour image passed as non-blank")
	}
	// A white page with a few coloured stripes: something is drawn.
	img := image.NewRGBA(image.Rect(0, 0, 200, 100))
	for y := range 100 {
		for x := range 200 {
			c := color.RGBA{255, 255, 255, 255}
			if x%20 < 4 {
				c = color.RGBA{uint8(x), uint8(y), 100, 255}
			}
			img.Set(x, y, c)
		}
	}
	var buf bytes.Buffer
	png.Encode(&buf, img)
	if err := NonBlank(buf.Bytes()); err != nil {
		t.Errorf("striped image: %v", err)
	}
	if err := NonBlank([]byte("not a png")); err == nil {
		t.Error("garbage passed as a screenshot")
	}
}
