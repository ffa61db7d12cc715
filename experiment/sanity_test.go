package experiment

import (
	"bytes"
	"strings"
	"testing"

	"github.com/mrlab/mrlab/labs"
	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/workload"
)

// TestSanityFailureMarksRuns: a bandwidth run whose goodput failed sanity
// is marked on its row only on a loss-free bed (no impairment loss or
// corruption, no fault timeline), and for RoCEv2 with go-back-N only where
// the fabric does not drop (PFC); a lossy bed's collapse is the
// measurement, an unjudged run (latency, collectives) never fails.
func TestSanityFailureMarksRuns(t *testing.T) {
	const why = "goodput 0.0123 Gb/s is 0.012% of the 100 Gb/s the lab's capacity and the workload allow with no loss (under 5%)"
	for _, c := range []struct {
		lab       string
		transport transport.Kind
		judged    bool
		want      string
	}{
		{"loss-sweep/lossy-0", transport.MetaRoCE, true, why},
		{"b2b", transport.MetaRoCE, true, why},
		{"incast/lossy", transport.MetaRoCE, true, why},
		{"incast/pfc", transport.RoCEv2, true, why},           // lossless: no collapse explained
		{"loss-sweep/modern-0", transport.RoCEv2, true, why},  // selective repeat
		{"incast/lossy", transport.RoCEv2, true, ""},          // go-back-N where queues drop: the baseline's known collapse
		{"loss-sweep/lossy-1", transport.MetaRoCE, true, ""},  // random loss on every link
		{"leafspine-faults", transport.MetaRoCE, true, ""},    // a fault timeline
		{"loss-sweep/lossy-0", transport.MetaRoCE, false, ""}, // not a bandwidth run
	} {
		lab, err := labs.Builtin(c.lab)
		if err != nil {
			t.Fatal(err)
		}
		r := &pointRun{lab: lab, point: Point{Spec: workload.Spec{Transport: c.transport}}, res: &workload.Result{Sanity: workload.Sanity{Judged: c.judged, OK: false, Why: why}}}
		if got := r.sanityFailure(); got != c.want {
			t.Errorf("%s %v (judged %v): sanity failure %q, want %q", c.lab, c.transport, c.judged, got, c.want)
		}
		r.res.Sanity.OK = true
		if got := r.sanityFailure(); got != "" {
			t.Errorf("%s: a sane run marked %q", c.lab, got)
		}
	}
}

// TestReportShowsSanityFailures: the report collects the rows' sanity
// failures with their commands, and the text and the results page show
// each.
func TestReportShowsSanityFailures(t *testing.T) {
	rows := []LossRow{{Command: "mrlab sim loss-sweep/lossy-0 --seed 1"}, {Command: "mrlab sim loss-sweep/lossy-0 --seed 2", Sanity: "goodput collapsed"}}
	got := sanityFailures(rows)
	if len(got) != 1 || got[0].Command != rows[1].Command || got[0].Why != "goodput collapsed" {
		t.Fatalf("sanity failures %+v, want the second row's", got)
	}
	if f := sanityFailures([]LossRow{{Command: "x"}}); len(f) != 0 {
		t.Errorf("sane rows gave %+v", f)
	}
	r := &Report{Experiment: "loss-sweep", Title: "t", Rows: rows, SanityFailures: got}
	var text, md bytes.Buffer
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "GOODPUT SANITY FAILED: "+rows[1].Command+": goodput collapsed") {
		t.Errorf("text report does not show the failure:\n%s", text.String())
	}
	if err := WriteMarkdown(&md, []*Report{r}, "results"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md.String(), "**Goodput sanity failed** in 1 runs") || !strings.Contains(md.String(), "`"+rows[1].Command+"`: goodput collapsed") {
		t.Errorf("results page does not show the failure:\n%s", md.String())
	}
}
