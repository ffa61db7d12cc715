package workload

import (
	"errors"
	"fmt"

	"github.com/mrlab/mrlab/transport"
)

// Compare runs spec once per transport kind, each time on a fresh cluster
// from build (build the same lab with the same seed each time, so the runs
// differ only in the transport), and returns the results in the order of
// kinds. A run that fails still contributes what it measured, or a result
// holding only the error if it never started; the error joins every run's
// error.
func Compare(build func() (*Cluster, error), spec Spec, kinds ...transport.Kind) ([]*Result, error) {
	return CompareWith(build, spec, Run, kinds...)
}

// CompareWith is Compare running each spec with run instead of Run (a
// caller driving the loop itself, to show progress, say).
func CompareWith(build func() (*Cluster, error), spec Spec, run func(*Cluster, Spec) (*Result, error), kinds ...transport.Kind) ([]*Result, error) {
	if len(kinds) == 0 {
		kinds = []transport.Kind{transport.MetaRoCE, transport.RoCEv2}
	}
	results := make([]*Result, len(kinds))
	var errs []error
	for i, k := range kinds {
		cl, err := build()
		if err != nil {
			return nil, fmt.Errorf("comparing on %v: %w", k, err)
		}
		s := spec
		s.Transport = k
		results[i], err = run(cl, s)
		if err != nil {
			errs = append(errs, fmt.Errorf("%v: %w", k, err))
		}
		if results[i] == nil {
			results[i] = &Result{Workload: s.Name, Transport: k.String(), Lab: cl.Name, Seed: s.Seed,
				Size: s.Size, Iterations: s.Iterations, QueueDepth: s.QueueDepth, Conns: s.Conns, Streams: s.Streams,
				Errors: 1, FirstError: err.Error(), Check: DataCheck{FirstBad: "did not run"}}
		}
	}
	return results, errors.Join(errs...)
}

// DemoSpec is what `mrlab sim` runs with no arguments, once per transport
// (see Compare): a permutation of 64 KiB WRITEs, every host sending to
// another across the lab, long enough to show loss recovery and short
// enough to finish in a few seconds of wall time.
func DemoSpec() Spec {
	return Spec{Name: Permutation, Size: 64 << 10, Iterations: 500, QueueDepth: 16}
}
