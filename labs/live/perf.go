package live

import "github.com/mrlab/mrlab/internal/sim"

// perfRunner runs RDMA workloads on a lab engine's NICs.
type perfRunner struct {
	e *labEngine
}

func (r *perfRunner) init(e *labEngine) error {
	r.e = e
	return nil
}

func (r *perfRunner) start(now sim.Time, req PerfRequest, done func(PerfResult)) error {
	return errNoPerf
}
