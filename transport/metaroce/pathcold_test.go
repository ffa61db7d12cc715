package metaroce

import (
	"os"
	"reflect"
	"testing"
)

// TestMain checks, after every test of the package (lossy, failing,
// probing, mutated and fuzzed runs among them), that nothing wrote the
// cold state that paths not yet used share: a write there would change
// every other such path's initial state.
func TestMain(m *testing.M) {
	code := m.Run()
	if !reflect.ValueOf(freshCold).IsZero() {
		os.Stderr.WriteString("freshCold was written: a path's cold state was changed before use (path.go)\n")
		code = 1
	}
	os.Exit(code)
}
