// Package webtest drives a headless Chromium (Debian's chromium package,
// which scripts/test installs) from Go tests through the DevTools
// protocol (chromedp): open the web view, wait for it, read the DOM, take
// screenshots, and collect every console error and uncaught exception
// the page produced. Without chromium a test skips, except in CI
// (MRLAB_CI=1), where it fails.
package webtest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/mrlab/mrlab/internal/testenv"
)

// Browser is one headless Chromium with one tab, closed when the test
// ends.
type Browser struct {
	t   testing.TB
	ctx context.Context

	mu     sync.Mutex
	errors []string
}

// Width and Height are the browser window's size.
const (
	Width  = 1600
	Height = 1000
)

// New starts Chromium with a fresh profile in the test's temporary
// directory, with the flags that work on these machines (no sandbox as
// root, no GPU, nothing fetched from the network).
func New(t testing.TB) *Browser {
	t.Helper()
	path := testenv.RequireCommand(t, "chromium")
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(Width, Height),
	}
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelC := chromedp.NewContext(actx)
	b := &Browser{t: t, ctx: ctx}
	t.Cleanup(func() {
		cancelC()
		cancelA()
	})
	// The first call starts the browser; it must have no timeout.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	if err := b.Do(10*time.Second, chromedp.EmulateViewport(Width, Height)); err != nil {
		t.Fatalf("chromium viewport: %v", err)
	}
	msgs := chromedp.Console(ctx)
	go func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleException || m.Type == "assert" {
				b.mu.Lock()
				b.errors = append(b.errors, fmt.Sprintf("%s (%s:%d)", m, m.URL, m.Line))
				b.mu.Unlock()
			}
		}
	}()
	return b
}

// Errors returns what the page reported as errors so far.
func (b *Browser) Errors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.errors...)
}

// Do runs actions in the tab, bounded by limit.
func (b *Browser) Do(limit time.Duration, actions ...chromedp.Action[chromedp.Void]) error {
	ctx, cancel := context.WithTimeout(b.ctx, limit)
	defer cancel()
	return chromedp.Do(ctx, actions...)
}

// Open loads url and waits until the page says it is ready and has drawn
// a first frame (window.mrlab.ready and stats.frames > 0).
func (b *Browser) Open(url string) error {
	if err := b.Do(30*time.Second, chromedp.Navigate(url)); err != nil {
		return fmt.Errorf("opening %s: %w", url, err)
	}
	return b.WaitFor(`window.mrlab && window.mrlab.ready && window.mrlab.stats.frames > 0`, 30*time.Second)
}

// Eval evaluates a JavaScript expression and returns its value.
func Eval[T any](b *Browser, expr string) (T, error) {
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
	if err != nil {
		return v, fmt.Errorf("evaluating %s: %w", expr, err)
	}
	return v, nil
}

// Click clicks the element a CSS selector finds first.
func (b *Browser) Click(selector string) error {
	q, err := json.Marshal(selector)
	if err != nil {
		return err
	}
	// dispatchEvent, not click(): SVG elements have no click method.
	ok, err := Eval[bool](b, fmt.Sprintf(`(() => { const e = document.querySelector(%s); if (!e) return false;
		e.dispatchEvent(new MouseEvent("click", {bubbles: true, cancelable: true})); return true })()`, q))
	if err == nil && !ok {
		err = fmt.Errorf("click: nothing matches %s", selector)
	}
	return err
}

// WaitFor polls a JavaScript condition until it is true or limit passes.
func (b *Browser) WaitFor(cond string, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(b.ctx, limit)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](cond, chromedp.WithPollingInterval(20*time.Millisecond))); err != nil {
		return fmt.Errorf("waiting %v for %s: %w", limit, cond, err)
	}
	return nil
}

// ShotDir returns where a test writes its screenshots: the test's
// temporary directory, or $MRLAB_SCREENSHOTS when set (to keep them).
func ShotDir(t testing.TB) string {
	if d := os.Getenv("MRLAB_SCREENSHOTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// Screenshot captures the window as PNG, writes it to path, and checks it
// is not blank (see NonBlank).
func (b *Browser) Screenshot(path string) error {
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	buf, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		return fmt.Errorf("screenshot: %w", err)
	}
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		return err
	}
	return NonBlank(buf)
}

// NonBlank checks that a PNG shows something: at least 2% of its pixels
// differ from its most common colour, in at least 8 distinct colours.
func NonBlank(pngData []byte) error {
	img, err := png.Decode(bytes.NewReader(pngData))
	if err != nil {
		return fmt.Errorf("screenshot is not a PNG: %w", err)
	}
	bounds := img.Bounds()
	counts := map[color.RGBA]int{}
	total := 0
	// Every 4th pixel each way is plenty to tell.
	for y := bounds.Min.Y; y < bounds.Max.Y; y += 4 {
		for x := bounds.Min.X; x < bounds.Max.X; x += 4 {
			r, g, bl, a := img.At(x, y).RGBA()
			counts[color.RGBA{uint8(r >> 8), uint8(g >> 8), uint8(bl >> 8), uint8(a >> 8)}]++
			total++
		}
	}
	most := 0
	for _, n := range counts {
		most = max(most, n)
	}
	if total == 0 || float64(total-most) < 0.02*float64(total) || len(counts) < 8 {
		return fmt.Errorf("screenshot %dx%d looks blank: %d colours, %.1f%% of pixels off the background",
			bounds.Dx(), bounds.Dy(), len(counts), 100*float64(total-most)/float64(max(total, 1)))
	}
	return nil
}

// Blank returns a one-colour PNG (for NonBlank's own test).
func Blank(w, h int) []byte {
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for i := range img.Pix {
		img.Pix[i] = 0xff
	}
	var buf bytes.Buffer
	png.Encode(&buf, img)
	return buf.Bytes()
}
