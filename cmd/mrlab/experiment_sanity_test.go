package main

import (
	"strings"
	"testing"

	"github.com/mrlab/mrlab/experiment"
)

// TestExperimentSanityFails: mrlab experiment fails once every report is
// written when a run failed goodput sanity on a loss-free bed, naming the
// experiment, the count and the first run's command; otherwise it does not.
func TestExperimentSanityFails(t *testing.T) {
	ok := &experiment.Report{Experiment: "incast"}
	bad := &experiment.Report{Experiment: "loss-sweep", SanityFailures: []experiment.RunFailure{
		{Command: "mrlab sim loss-sweep/lossy-0 --seed 2", Why: "goodput collapsed"}, {Command: "c2", Why: "w2"}}}
	if err := sanityError([]*experiment.Report{ok}); err != nil {
		t.Errorf("sane reports: %v", err)
	}
	err := sanityError([]*experiment.Report{ok, bad})
	if err == nil || !strings.Contains(err.Error(), "experiment loss-sweep: goodput sanity failed in 2 runs") ||
		!strings.Contains(err.Error(), "mrlab sim loss-sweep/lossy-0 --seed 2: goodput collapsed") {
		t.Errorf("error %v, want loss-sweep's 2 failures with the first command", err)
	}
}
