// Package livetest brings live labs up for tests in other packages: Up
// starts one and takes it down when the test ends, failing the test if any
// of its namespaces is left behind. (labs/live's own tests keep their
// helper: an internal test of live cannot import a package that imports
// live.)
package livetest

import (
	"context"
	"testing"

	"github.com/mrlab/mrlab/labs/hostns"
	"github.com/mrlab/mrlab/labs/live"
)

// Up brings lab name up on eng with opts (RunDir defaults to a temporary
// directory, Logf to the test's log) and returns it with its state; the
// lab is closed at the test's cleanup, and a namespace it recorded that
// still exists then is reported and deleted (by its exact name).
func Up(t testing.TB, name string, eng live.Engine, opts live.Options) (*live.Lab, live.State) {
	t.Helper()
	if opts.RunDir == "" {
		opts.RunDir = t.TempDir()
	}
	opts.Logf = t.Logf
	l, err := live.Up(context.Background(), name, eng, opts)
	if err != nil {
		t.Fatal(err)
	}
	st := l.State()
	t.Cleanup(func() {
		l.Close()
		for _, ns := range st.Namespaces {
			if hostns.Exists(ns) {
				t.Errorf("namespace %s left behind; deleting it", ns)
				hostns.Delete(ns)
			}
		}
	})
	return l, st
}
