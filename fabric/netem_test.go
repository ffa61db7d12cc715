package fabric_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/mrlab/mrlab/fabric"
	"github.com/mrlab/mrlab/internal/sim"
)

func TestParseImpairment(t *testing.T) {
	cases := []struct {
		in   string
		want fabric.Impairment
		str  string // canonical String(); "" means same as in
	}{
		{"", fabric.Impairment{}, ""},
		{"loss random 1%", fabric.Impairment{Loss: fabric.LossModel{Kind: fabric.LossRandom, P: 0.01}}, ""},
		{"loss 10%", fabric.Impairment{Loss: fabric.LossModel{Kind: fabric.LossRandom, P: 0.1}}, "loss random 10%"},
		{"loss 0.5", fabric.Impairment{Loss: fabric.LossModel{Kind: fabric.LossRandom, P: 0.005}}, "loss random 0.5%"},
		{"loss gemodel 1% 10% 70% 0.1%", fabric.Impairment{Loss: fabric.LossModel{Kind: fabric.LossGemodel, GEp: 0.01, GEr: 0.1, GE1h: 0.7, GE1k: 0.001}}, ""},
		{"loss gemodel 1%", fabric.Impairment{Loss: fabric.LossModel{Kind: fabric.LossGemodel, GEp: 0.01, GEr: 0.99, GE1h: 1}}, "loss gemodel 1% 99% 100% 0%"},
		{"loss state 1% 10% 2% 5% 0.1%", fabric.Impairment{Loss: fabric.LossModel{Kind: fabric.LossState, P13: 0.01, P31: 0.1, P32: 0.02, P23: 0.05, P14: 0.001}}, ""},
		{"loss state 2%", fabric.Impairment{Loss: fabric.LossModel{Kind: fabric.LossState, P13: 0.02, P31: 0.98, P23: 1}}, "loss state 2% 98% 0% 100% 0%"},
		{"delay 10us", fabric.Impairment{Delay: 10 * sim.Microsecond}, ""},
		{"delay 10us 2us distribution normal", fabric.Impairment{Delay: 10 * sim.Microsecond, Jitter: 2 * sim.Microsecond, DelayDist: fabric.DistNormal}, ""},
		{"delay 1msec 100usec", fabric.Impairment{Delay: sim.Millisecond, Jitter: 100 * sim.Microsecond}, "delay 1ms 100us"},
		{"duplicate 1%", fabric.Impairment{Duplicate: 0.01}, ""},
		{"corrupt 0.1%", fabric.Impairment{Corrupt: 0.001}, ""},
		{"delay 5ms reorder 25%", fabric.Impairment{Delay: 5 * sim.Millisecond, Reorder: 0.25}, ""},
		{"rate 10gbit", fabric.Impairment{Rate: 10e9}, ""},
		// netem's correlations, ecn, rate overheads and slots.
		{"loss random 1% 25%", fabric.Impairment{Loss: fabric.LossModel{Kind: fabric.LossRandom, P: 0.01, Corr: 0.25}}, ""},
		{"loss 0.3% 25", fabric.Impairment{Loss: fabric.LossModel{Kind: fabric.LossRandom, P: 0.003, Corr: 0.25}}, "loss random 0.3% 25%"},
		{"delay 100ms 10ms 25%", fabric.Impairment{Delay: 100 * sim.Millisecond, Jitter: 10 * sim.Millisecond, DelayCorr: 0.25}, ""},
		{"duplicate 1% 50%", fabric.Impairment{Duplicate: 0.01, DupCorr: 0.5}, ""},
		{"corrupt 0.1% 10%", fabric.Impairment{Corrupt: 0.001, CorruptCorr: 0.1}, ""},
		{"delay 5ms reorder 25% 50%", fabric.Impairment{Delay: 5 * sim.Millisecond, Reorder: 0.25, ReorderCorr: 0.5}, ""},
		{"loss 1% ecn", fabric.Impairment{Loss: fabric.LossModel{Kind: fabric.LossRandom, P: 0.01}, ECN: true}, "loss random 1% ecn"},
		{"ecn loss gemodel 1%", fabric.Impairment{Loss: fabric.LossModel{Kind: fabric.LossGemodel, GEp: 0.01, GEr: 0.99, GE1h: 1}, ECN: true}, "loss gemodel 1% 99% 100% 0% ecn"},
		{"rate 25gbit 20", fabric.Impairment{Rate: 25e9, RateOverhead: 20}, ""},
		{"rate 10gbit -14", fabric.Impairment{Rate: 10e9, RateOverhead: -14}, ""},
		{"rate 1mbit 20 100 5", fabric.Impairment{Rate: 1e6, RateOverhead: 20, CellSize: 100, CellOverhead: 5}, ""},
		{"rate 1mbit 0 53", fabric.Impairment{Rate: 1e6, CellSize: 53}, ""},
		{"rate 1gbit 20 -5", fabric.Impairment{Rate: 1e9, RateOverhead: 20, CellOverhead: -5}, "rate 1gbit 20 0 -5"},
		{"slot 1ms", fabric.Impairment{Slot: fabric.Slot{Min: sim.Millisecond, Max: sim.Millisecond}}, ""},
		{"slot 100us 200us packets 4 bytes 10000", fabric.Impairment{Slot: fabric.Slot{Min: 100 * sim.Microsecond, Max: 200 * sim.Microsecond, Packets: 4, Bytes: 10000}}, ""},
		{"slot distribution normal 1ms 100us packets 8", fabric.Impairment{Slot: fabric.Slot{UseDist: true, Dist: fabric.DistNormal, Delay: sim.Millisecond, Jitter: 100 * sim.Microsecond, Packets: 8}}, ""},
		{"rate 25Gbps", fabric.Impairment{Rate: 200e9}, "rate 200gbit"},
		{
			"rate 40gbit corrupt 1% loss gemodel 1% 10% 70% 0.1% duplicate 2% delay 3us 1us distribution pareto reorder 5%",
			fabric.Impairment{
				Loss:  fabric.LossModel{Kind: fabric.LossGemodel, GEp: 0.01, GEr: 0.1, GE1h: 0.7, GE1k: 0.001},
				Delay: 3000, Jitter: 1000, DelayDist: fabric.DistPareto, Duplicate: 0.02, Corrupt: 0.01, Reorder: 0.05, Rate: 40e9,
			},
			"delay 3us 1us distribution pareto loss gemodel 1% 10% 70% 0.1% duplicate 2% corrupt 1% reorder 5% rate 40gbit",
		},
	}
	for _, c := range cases {
		got, err := fabric.ParseImpairment(c.in)
		if err != nil {
			t.Errorf("ParseImpairment(%q): %v", c.in, err)
			continue
		}
		if diff := cmp.Diff(c.want, got); diff != "" {
			t.Errorf("ParseImpairment(%q) (-want +got):\n%s", c.in, diff)
		}
		str := c.str
		if str == "" {
			str = c.in
		}
		if got.String() != str {
			t.Errorf("String() = %q, want %q", got.String(), str)
		}
		back, err := fabric.ParseImpairment(got.String())
		if err != nil || back != got {
			t.Errorf("round trip of %q: %+v, %v", got.String(), back, err)
		}
	}
}

func TestParseImpairmentErrors(t *testing.T) {
	cases := []struct {
		in, want string // want: substring of the error
	}{
		{"loss", `word 2 (end of input)`},
		{"loss bogus 1%", `word 2 ("bogus")`},
		{"loss random 101%", `word 3 ("101%"): loss probability: percentage "101%" outside`},
		{"loss random -1%", `word 3 ("-1%")`},
		{"loss random 1% 25% 3%", `word 5 ("3%"): unexpected extra argument to loss`},
		{"delay 10us 1us 25% 3", `word 5 ("3"): unexpected extra argument`},
		{"loss random 1% 125%", `word 4 ("125%"): correlation`},
		{"ecn", `ecn marks what a loss model would drop`},
		{"loss gemodel 1% 25% 50% 1% 3%", `word 7 ("3%"): unexpected extra argument`},
		{"rate 1mbit 20 100 5 7", `word 6 ("7"): unexpected extra argument to rate`},
		{"rate 1gbit 20 x", `word 4 ("x"): unknown`},
		{"rate 1gbit 99999999", `word 3 ("99999999"): rate packet overhead`},
		{"slot", `want slot MIN_DELAY`},
		{"slot 2ms 1ms", `word 3 ("1ms"): slot max delay below the min`},
		{"slot distribution normal 1ms 0", `word 5 ("0"): slot jitter must be positive`},
		{"slot distribution custom 1ms 1ms", `word 3 ("custom"): unknown distribution`},
		{"slot 1ms packets 0", `word 4 ("0"): slot packets must be at least 1`},
		{"gap 5", `word 1 ("gap"): netem's gap is not supported`},
		{"seed 7", `netem's seed is not supported`},
		{"delay ten", `word 2 ("ten")`},
		{"delay 10us distribution gauss", `word 4 ("gauss"): unknown distribution`},
		{"jitter 1us", `word 1 ("jitter"): unknown`},
		{"limit 1000", `word 1 ("limit"): netem's limit`},
		{"rate 10furlongs", `word 2 ("10furlongs"): parsing rate`},
		{"rate", `word 2 (end of input): missing rate`},
		{"duplicate 1% duplicate 2%", `word 3 ("duplicate"): duplicate given twice`},
		{"loss gemodel 1% 10% 170%", `word 5 ("170%")`},
		{"loss state 60% 10% 2% 5% 50%", `p13 + p14 exceed 100%`},
		{"reorder 25%", `reordering needs a delay`},
		{"corrupt 1%x", `word 2 ("1%x")`},
		{"loss nan%", `word 2 ("nan%")`},
	}
	for _, c := range cases {
		_, err := fabric.ParseImpairment(c.in)
		if err == nil {
			t.Errorf("ParseImpairment(%q) accepted", c.in)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseImpairment(%q) = %v; want it to mention %s", c.in, err, c.want)
		}
	}
}

func FuzzParseImpairment(f *testing.F) {
	for _, s := range []string{
		"loss random 1%", "loss gemodel 1% 10% 70% 0.1%", "loss state 1% 10% 2% 5% 0.1%",
		"delay 10us 2us distribution normal", "duplicate 1%", "corrupt 0.1%", "delay 1ms reorder 25%",
		"rate 10gbit", "loss 3", "delay 1.5e3ns", "rate 1e9bit",
		"loss 1% 25% ecn", "delay 1ms 1ms 50%", "rate 1mbit 20 100 5", "rate 1gbit -14",
		"slot 1ms 2ms packets 3 bytes 9000", "slot distribution pareto 1ms 1ms",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		imp, err := fabric.ParseImpairment(s)
		if err != nil {
			return
		}
		if err := imp.Validate(); err != nil {
			t.Fatalf("ParseImpairment(%q) returned an invalid impairment: %v", s, err)
		}
		str := imp.String()
		back, err := fabric.ParseImpairment(str)
		if err != nil {
			t.Fatalf("ParseImpairment(%q).String() = %q does not parse: %v", s, str, err)
		}
		if back != imp {
			t.Fatalf("round trip of %q via %q: %+v != %+v", s, str, back, imp)
		}
	})
}

func TestParseRate(t *testing.T) {
	cases := []struct {
		in   string
		want float64
		str  string
	}{
		{"100gbit", 100e9, "100gbit"},
		{"100Gbit", 100e9, "100gbit"},
		{"400mbit", 400e6, "400mbit"},
		{"1.6tbit", 1.6e12, "1.6tbit"},
		{"12.5gbit", 12.5e9, "12.5gbit"},
		{"25Gbps", 200e9, "200gbit"}, // tc: bps = bytes per second
		{"1kibit", 1024, "1.024kbit"},
		{"1000", 1000, "1kbit"},
		{"3bit", 3, "3bit"},
	}
	for _, c := range cases {
		got, err := fabric.ParseRate(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseRate(%q) = %v, %v; want %v", c.in, got, err, c.want)
			continue
		}
		if s := fabric.FormatRate(got); s != c.str {
			t.Errorf("FormatRate(%v) = %q, want %q", got, s, c.str)
		}
	}
	for _, bad := range []string{"", "gbit", "10 gbit", "10gbits", "-1gbit", "0bit", "1e20bit", "0x10gbit", "infgbit", "nan"} {
		if _, err := fabric.ParseRate(bad); err == nil {
			t.Errorf("ParseRate(%q) accepted", bad)
		}
	}
}

func FuzzParseRate(f *testing.F) {
	for _, s := range []string{"100gbit", "25Gbps", "1.5tbit", "400mbit", "3", "1kibit"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := fabric.ParseRate(s)
		if err != nil {
			return
		}
		if !(r >= 1 && r <= fabric.MaxRate) {
			t.Fatalf("ParseRate(%q) = %v out of range", s, r)
		}
		back, err := fabric.ParseRate(fabric.FormatRate(r))
		if err != nil || back != r {
			t.Fatalf("FormatRate(%v) = %q parses to %v, %v", r, fabric.FormatRate(r), back, err)
		}
	})
}
