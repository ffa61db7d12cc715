package workload

import (
	"testing"

	"github.com/mrlab/mrlab/softnic"
)

// BenchmarkPayloadModes runs write_bw between two hosts in each payload
// mode: what the data oracle (per-message checks at completion, the
// placement watch) costs shows as the ratio between two runs of this
// benchmark, one on each side of a change.
func BenchmarkPayloadModes(b *testing.B) {
	for _, mode := range []softnic.PayloadMode{softnic.PayloadBytes, softnic.PayloadSynthetic} {
		for _, k := range benchKinds() {
			b.Run(mode.String()+"/"+k.String(), func(b *testing.B) {
				benchRun(b, lab{hosts: 2, seed: 1}, Spec{Name: WriteBW, Transport: k, Size: 65536, Iterations: 1000,
					QueueDepth: 16, Payload: mode})
			})
		}
	}
}
