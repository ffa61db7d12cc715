package fabric

import (
	"math"
	"testing"

	"github.com/mrlab/mrlab/internal/sim"
)

// SteadyState against the closed forms of the special cases.
func TestSteadyStateClosedForms(t *testing.T) {
	cases := []struct {
		name       string
		m          LossModel
		rate, mean float64
	}{
		{"random", LossModel{Kind: LossRandom, P: 0.1}, 0.1, 1 / 0.9},
		// Simple Gilbert: lose every packet in bad, none in good.
		{"simple gilbert", LossModel{Kind: LossGemodel, GEp: 0.01, GEr: 0.3, GE1h: 1}, 0.01 / 0.31, 1 / 0.3},
		// Gilbert-Elliott: pi_bad = p/(p+r); loss = pi_g(1-k) + pi_b(1-h).
		{"gilbert-elliott rate", LossModel{Kind: LossGemodel, GEp: 0.02, GEr: 0.2, GE1h: 0.5, GE1k: 0.01},
			(0.2*0.01 + 0.02*0.5) / 0.22, -1},
		// 4-state with p13 alone is Bernoulli(p13).
		{"state bernoulli", LossModel{Kind: LossState, P13: 0.05, P31: 0.95, P23: 1}, 0.05, 1 / 0.95},
		// 2-state (p13, p31): Gilbert with loss in 3: rate p13/(p13+p31),
		// bursts geometric with mean 1/p31.
		{"state two", LossModel{Kind: LossState, P13: 0.01, P31: 0.4, P23: 1}, 0.01 / 0.41, 1 / 0.4},
		// Isolated losses only (p14): each burst is one packet; from 1, go
		// to 4 with p14 then back: rate = p14/(1+p14).
		{"state isolated", LossModel{Kind: LossState, P14: 0.02, P31: 1, P23: 1}, 0.02 / 1.02, 1},
	}
	for _, c := range cases {
		st, err := c.m.SteadyState()
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if math.Abs(st.Rate-c.rate) > 1e-12 {
			t.Errorf("%s: rate %v, want %v", c.name, st.Rate, c.rate)
		}
		if c.mean >= 0 && math.Abs(st.MeanBurst-c.mean) > 1e-9 {
			t.Errorf("%s: mean burst %v, want %v", c.name, st.MeanBurst, c.mean)
		}
	}
}

// runLoss draws n packets from a model and measures the loss rate and the
// mean run of consecutive losses.
func runLoss(m LossModel, seed uint64, n int) (rate, meanBurst float64) {
	var s lossState
	r := sim.NewRand(seed, "loss test")
	s.reset(m, r)
	lost, bursts := 0, 0
	prev := false
	for i := 0; i < n; i++ {
		l := s.lose(r)
		if l {
			lost++
			if !prev {
				bursts++
			}
		}
		prev = l
	}
	return float64(lost) / float64(n), float64(lost) / float64(bursts)
}

// The Markov chains as implemented match their steady state (a fixed-seed
// run of 2 million packets, within 3%).
func TestLossModelsMatchSteadyState(t *testing.T) {
	models := []struct {
		name string
		m    LossModel
	}{
		{"gemodel 1% 10% 70% 0.1%", LossModel{Kind: LossGemodel, GEp: 0.01, GEr: 0.1, GE1h: 0.7, GE1k: 0.001}},
		{"gemodel 5% 30% 100% 0%", LossModel{Kind: LossGemodel, GEp: 0.05, GEr: 0.3, GE1h: 1}},
		{"state 1% 10% 2% 5% 0.1%", LossModel{Kind: LossState, P13: 0.01, P31: 0.1, P32: 0.02, P23: 0.05, P14: 0.001}},
		{"state 2% 30% 40% 20% 1%", LossModel{Kind: LossState, P13: 0.02, P31: 0.3, P32: 0.4, P23: 0.2, P14: 0.01}},
		{"random 1%", LossModel{Kind: LossRandom, P: 0.01}},
	}
	for _, c := range models {
		want, err := c.m.SteadyState()
		if err != nil {
			t.Fatal(err)
		}
		rate, burst := runLoss(c.m, 42, 2_000_000)
		if math.Abs(rate-want.Rate) > 0.03*want.Rate {
			t.Errorf("%s: loss rate %.5f, steady state %.5f", c.name, rate, want.Rate)
		}
		if math.Abs(burst-want.MeanBurst) > 0.03*want.MeanBurst {
			t.Errorf("%s: mean burst %.4f, steady state %.4f", c.name, burst, want.MeanBurst)
		}
		t.Logf("%s: rate %.5f (%.5f) burst %.4f (%.4f)", c.name, rate, want.Rate, burst, want.MeanBurst)
	}
}
