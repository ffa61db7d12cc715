package experiment

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/mrlab/mrlab/softnic"
)

// TestPartitionedSameOutput runs the experiments whose points run on the
// partitioned engine (their workloads are WRITE and READ streams; their
// probes observe the fabric through the partitions' merged records, or
// sample on the global loop) on one plain loop and on 2 and 4
// partitions, and wants the same CSV and JSON to the byte: incast's
// probe reads every delivery at the bottleneck with its exact arrival
// time, congestion and plane-scaling sample link and NIC counters.
func TestPartitionedSameOutput(t *testing.T) {
	for _, name := range []string{"incast", "congestion", "plane-scaling"} {
		t.Run(name, func(t *testing.T) {
			e, err := Lookup(name)
			if err != nil {
				t.Fatal(err)
			}
			out := func(parts int) (string, int64) {
				before := partitionedRuns.Load()
				r, err := e.Run(Config{Seed: 3, Seeds: 1, Scale: Tiny, Jobs: 1, Payload: softnic.PayloadSynthetic, Partitions: parts, exactParts: true})
				if err != nil {
					t.Fatalf("%d partitions: %v", parts, err)
				}
				var b bytes.Buffer
				if err := r.WriteCSV(&b); err != nil {
					t.Fatal(err)
				}
				if err := r.WriteJSON(&b); err != nil {
					t.Fatal(err)
				}
				return b.String(), partitionedRuns.Load() - before
			}
			want, n := out(1)
			if n != 0 {
				t.Fatalf("1 partition: %d points ran partitioned, want a plain loop", n)
			}
			for _, parts := range []int{2, 4} {
				got, n := out(parts)
				if n == 0 {
					t.Errorf("%d partitions: no point ran partitioned", parts)
				}
				if got != want {
					t.Errorf("%d partitions: output differs from one loop:\n%s", parts, firstLineDiff(want, got))
				}
			}
		})
	}
}

func firstLineDiff(a, b string) string {
	al, bl := bytes.Split([]byte(a), []byte("\n")), bytes.Split([]byte(b), []byte("\n"))
	for i := range min(len(al), len(bl)) {
		if !bytes.Equal(al[i], bl[i]) {
			return fmt.Sprintf("line %d:\n1: %.400s\nN: %.400s", i+1, al[i], bl[i])
		}
	}
	return fmt.Sprintf("%d lines vs %d", len(al), len(bl))
}

// BenchmarkIncastPartitions runs the incast experiment at quick scale,
// one simulation at a time, on one plain loop and on 2 partitions (its
// 64-host lossy beds run partitioned; its PFC beds stay on one loop): the
// ratio of ns/op is what partitions give the experiments whose beds are
// big enough. It needs a quiet machine with at least 2 cores:
//
//	go test ./experiment -run '^$' -bench IncastPartitions -benchtime 1x -count 3
func BenchmarkIncastPartitions(b *testing.B) {
	e, err := Lookup("incast")
	if err != nil {
		b.Fatal(err)
	}
	for _, parts := range []int{1, 2} {
		b.Run(fmt.Sprintf("parts=%d", parts), func(b *testing.B) {
			for range b.N {
				before := partitionedRuns.Load()
				if _, err := e.Run(Config{Seed: 1, Seeds: 1, Scale: Quick, Jobs: 1, Payload: softnic.PayloadSynthetic, Partitions: parts}); err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(partitionedRuns.Load()-before), "partitioned-points/op")
			}
		})
	}
}
