package live

import (
	"os"
	"regexp"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestExampleRulesRuntimeSeries: every runtime series (mrlab_nic_*,
// mrlab_host_*) the shipped Prometheus rules read is one the lab's
// collector serves (observe/telemetry/prom's TestExamples checks the rest
// against the telemetry exporter, and the rules with promtool).
func TestExampleRulesRuntimeSeries(t *testing.T) {
	served := map[string]bool{}
	ch := make(chan *prometheus.Desc, 64)
	go func() { newLabCollector(nil).Describe(ch); close(ch) }()
	for d := range ch {
		if m := regexp.MustCompile(`fqName: "(\w+)"`).FindStringSubmatch(d.String()); m != nil {
			served[m[1]] = true
		}
	}
	rules, err := os.ReadFile("../../observe/telemetry/prom/examples/mrlab-rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	read := 0
	for _, m := range regexp.MustCompile(`(?:^|[^:\w])(mrlab_(?:nic|host)_\w+)`).FindAllStringSubmatch(string(rules), -1) {
		read++
		if !served[m[1]] {
			t.Errorf("the example rules read %s, which the lab's collector does not serve", m[1])
		}
	}
	if read == 0 {
		t.Error("the example rules read no runtime series: the test checks nothing")
	}
}
