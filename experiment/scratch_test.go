package experiment

import (
	"os"
	"testing"

	"github.com/mrlab/mrlab/transport"
	"github.com/mrlab/mrlab/transport/rocev2"
)

type fakeMR struct{ *rocev2.Protocol }

func (fakeMR) Kind() transport.Kind { return transport.MetaRoCE }
func (fakeMR) UDPPort() uint16      { return 4795 }

func init() {
	if os.Getenv("FAKEMR") != "" {
		metaroceProtocols = func() []transport.Protocol {
			return []transport.Protocol{fakeMR{rocev2.NewProtocol(rocev2.Options{Timeout: 4})}}
		}
	}
}

func TestScratch(t *testing.T) {
	names := []string{"loss-sweep", "plane-scaling", "plane-failure", "incast", "collectives"}
	if n := os.Getenv("EXP"); n != "" {
		names = []string{n}
	}
	sc := Tiny
	if s := os.Getenv("SCALE"); s != "" {
		sc, _ = ParseScale(s)
	}
	for _, n := range names {
		e, _ := Lookup(n)
		r, err := e.Run(Config{Scale: sc, Progress: os.Stderr, Jobs: 2})
		if err != nil {
			t.Log(err)
			continue
		}
		r.WriteText(os.Stderr)
		if _, err := r.WriteFiles("/tmp/exp"); err != nil {
			t.Error(err)
		}
	}
}

func TestScratchFabric(t *testing.T) {
	pk, wall, err := permFabric()
	t.Log(pk, wall, float64(pk)/wall.Seconds(), err)
}
