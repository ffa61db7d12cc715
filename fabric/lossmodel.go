package fabric

import (
	"fmt"
	"math/rand/v2"
)

// lossState runs a LossModel packet by packet. Its zero value with a
// LossNone model loses nothing.
type lossState struct {
	m LossModel
	// state is the Markov chain's current state: for gemodel 0 = good,
	// 1 = bad; for the 4-state model 1..4 as netem numbers them (1 = good
	// reception in a gap, 2 = good reception in a burst, 3 = loss in a
	// burst, 4 = isolated loss).
	state uint8
	// cr correlates random loss (LossModel.Corr).
	cr crandom
}

func (s *lossState) reset(m LossModel, r *rand.Rand) {
	s.m = m
	s.state = 0
	if m.Kind == LossState {
		s.state = 1
	}
	s.cr = crandom{}
	if m.Kind == LossRandom {
		s.cr = newCrandom(m.Corr, r)
	}
}

// lose draws the fate of the next packet.
//
// Random loss with a correlation draws as netem does (see crandom); without
// one, a plain uniform draw (the same distribution).
//
// gemodel follows netem's loss_gilb_ell: the packet is lost with the
// current state's loss probability (1-k in good, 1-h in bad), and the state
// moves (good->bad with p, bad->good with r) for the next packet.
//
// The 4-state model follows netem's loss_4state: each packet moves the chain
// (1->3 p13, 1->4 p14, 2->3 p23, 3->1 p31, 3->2 p32, 4->1 always) and is
// lost when the new state is 3 or 4.
func (s *lossState) lose(r *rand.Rand) bool {
	m := &s.m
	switch m.Kind {
	case LossRandom:
		if m.Corr > 0 {
			return s.cr.hit(m.P, r) // netem's correlated draw
		}
		return m.P > 0 && r.Float64() < m.P
	case LossGemodel:
		var lost bool
		if s.state == 0 {
			lost = m.GE1k > 0 && r.Float64() < m.GE1k
			if r.Float64() < m.GEp {
				s.state = 1
			}
		} else {
			lost = m.GE1h > 0 && r.Float64() < m.GE1h
			if r.Float64() < m.GEr {
				s.state = 0
			}
		}
		return lost
	case LossState:
		u := r.Float64()
		switch s.state {
		case 1:
			switch {
			case u < m.P14:
				s.state = 4
			case u < m.P14+m.P13:
				s.state = 3
			}
		case 2:
			if u < m.P23 {
				s.state = 3
			}
		case 3:
			switch {
			case u < m.P32:
				s.state = 2
			case u < m.P32+m.P31:
				s.state = 1
			}
		case 4:
			s.state = 1
		}
		return s.state >= 3
	}
	return false
}

// LossStats are a loss model's long-run figures, computed from its Markov
// chain: what a long run of packets shows.
type LossStats struct {
	// Rate is the fraction of packets lost.
	Rate float64
	// MeanBurst is the mean length of a run of consecutive losses (0 when
	// nothing is lost).
	MeanBurst float64
}

// SteadyState returns the model's stationary loss rate and mean loss-burst
// length. It solves the chain of (state, lost) pairs numerically, so it
// holds for every parameter choice, not only the closed-form special cases
// (for the simple Gilbert model, 1-k=0 and 1-h=1, Rate = p/(p+r) and
// MeanBurst = 1/r).
func (m LossModel) SteadyState() (LossStats, error) {
	var states int
	var trans func(from, to int) float64
	var lossIn func(s int) float64
	switch m.Kind {
	case LossNone:
		return LossStats{}, nil
	case LossRandom:
		if m.Corr > 0 {
			return LossStats{}, fmt.Errorf("correlated random loss has no closed-form steady state (netem's correlation is an approximation)")
		}
		if m.P >= 1 {
			return LossStats{Rate: 1}, nil
		}
		if m.P <= 0 {
			return LossStats{}, nil
		}
		return LossStats{Rate: m.P, MeanBurst: 1 / (1 - m.P)}, nil
	case LossGemodel:
		states = 2
		g := [2][2]float64{{1 - m.GEp, m.GEp}, {m.GEr, 1 - m.GEr}}
		trans = func(a, b int) float64 { return g[a][b] }
		lossIn = func(s int) float64 {
			if s == 0 {
				return m.GE1k
			}
			return m.GE1h
		}
		// In netem's gemodel a packet's fate depends on the state it
		// finds; expand to pairs (state, fate of the packet sent in it).
		return pairChain(states, trans, lossIn)
	case LossState:
		// States 1..4 mapped to 0..3. A packet's fate is the state it
		// moves into, so fate is a function of the state: lost in 3, 4.
		var t [4][4]float64
		t[0][3], t[0][2], t[0][0] = m.P14, m.P13, 1-m.P13-m.P14
		t[1][2], t[1][1] = m.P23, 1-m.P23
		t[2][1], t[2][0], t[2][2] = m.P32, m.P31, 1-m.P31-m.P32
		t[3][0] = 1
		pi, err := stationary(4, func(a, b int) float64 { return t[a][b] })
		if err != nil {
			return LossStats{}, err
		}
		rate := pi[2] + pi[3]
		// A burst starts when the chain moves from a received state
		// (1, 2) into a lost one (3, 4).
		starts := pi[0]*(t[0][2]+t[0][3]) + pi[1]*(t[1][2]+t[1][3])
		return stats(rate, starts), nil
	}
	return LossStats{}, fmt.Errorf("unknown loss model %d", m.Kind)
}

// pairChain handles models whose packet fate is a coin flip in each state:
// the chain over (state, fate of the previous packet) gives the rate and
// the burst starts.
func pairChain(n int, trans func(a, b int) float64, lossIn func(s int) float64) (LossStats, error) {
	pi, err := stationary(n, trans)
	if err != nil {
		return LossStats{}, err
	}
	var rate, starts float64
	for s := 0; s < n; s++ {
		rate += pi[s] * lossIn(s)
		// P(previous packet, sent in s, received; this one, sent in s', lost).
		for s2 := 0; s2 < n; s2++ {
			starts += pi[s] * (1 - lossIn(s)) * trans(s, s2) * lossIn(s2)
		}
	}
	return stats(rate, starts), nil
}

func stats(rate, starts float64) LossStats {
	if rate <= 0 {
		return LossStats{}
	}
	if starts <= 0 {
		// Every packet is lost (or loss is absorbing): one endless burst.
		return LossStats{Rate: rate, MeanBurst: 0}
	}
	return LossStats{Rate: rate, MeanBurst: rate / starts}
}

// stationary returns the stationary distribution of an n-state chain by
// solving pi = pi T with sum(pi) = 1 (Gaussian elimination with pivoting).
func stationary(n int, trans func(a, b int) float64) ([]float64, error) {
	// Rows: (T^T - I) pi = 0, with the last row replaced by sum(pi) = 1.
	a := make([][]float64, n)
	for i := range a {
		a[i] = make([]float64, n+1)
		for j := 0; j < n; j++ {
			a[i][j] = trans(j, i)
			if i == j {
				a[i][j] -= 1
			}
		}
	}
	for j := 0; j < n; j++ {
		a[n-1][j] = 1
	}
	a[n-1][n] = 1
	for c := 0; c < n; c++ {
		p := c
		for r := c + 1; r < n; r++ {
			if abs(a[r][c]) > abs(a[p][c]) {
				p = r
			}
		}
		if abs(a[p][c]) < 1e-15 {
			return nil, fmt.Errorf("loss model chain has no unique steady state")
		}
		a[c], a[p] = a[p], a[c]
		for r := 0; r < n; r++ {
			if r == c {
				continue
			}
			f := a[r][c] / a[c][c]
			for k := c; k <= n; k++ {
				a[r][k] -= f * a[c][k]
			}
		}
	}
	pi := make([]float64, n)
	for i := range pi {
		pi[i] = a[i][n] / a[i][i]
	}
	return pi, nil
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}
