package workload

import (
	"syscall"
	"testing"
	"time"

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

// BenchmarkOracleCost is what the data oracle (every message checked
// whole at its completion, every placement watched) costs in sim speed:
// write_bw between two hosts in each payload mode and transport, with
// the oracle on and off (oracleOff; the end-of-run check runs in both).
// Run both halves in one invocation and compare their ns/op (wall) and
// cpu-ns/op (the process's CPU time per run):
//
//	go test ./workload -run '^$' -bench BenchmarkOracleCost -count 5
func BenchmarkOracleCost(b *testing.B) {
	for _, mode := range []softnic.PayloadMode{softnic.PayloadBytes, softnic.PayloadSynthetic} {
		for _, k := range benchKinds() {
			for _, on := range []bool{true, false} {
				name := mode.String() + "/" + k.String() + "/oracle=off"
				if on {
					name = mode.String() + "/" + k.String() + "/oracle=on"
				}
				b.Run(name, func(b *testing.B) {
					oracleOff = !on
					defer func() { oracleOff = false }()
					spec := Spec{Name: WriteBW, Transport: k, Size: 65536, Iterations: 1000, QueueDepth: 16, Payload: mode}
					var cpu time.Duration
					n := 0
					for b.Loop() {
						b.StopTimer()
						cl, _ := lab{hosts: 2, seed: 1}.build(b)
						b.StartTimer()
						c0 := processCPU()
						res, err := Run(cl, spec)
						cpu += processCPU() - c0
						if err != nil {
							b.Fatal(err)
						}
						// The baseline really skips the oracle, and both
						// halves run the same simulation.
						if checked := res.Check.Messages > 0; checked != on || !res.Check.OK || res.Messages != 1000 {
							b.Fatalf("oracle on %v: %d messages, %d checked at completion, data ok %v", on, res.Messages, res.Check.Messages, res.Check.OK)
						}
						n++
					}
					// Process CPU time (user+sys) per run: less disturbed
					// than wall time by other work on a shared machine.
					b.ReportMetric(float64(cpu.Nanoseconds())/float64(n), "cpu-ns/op")
				})
			}
		}
	}
}

// processCPU is the process's user+sys CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
