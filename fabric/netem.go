package fabric

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/mrlab/mrlab/internal/sim"
)

var distNames = [...]string{
	DistUniform:      "uniform",
	DistNormal:       "normal",
	DistPareto:       "pareto",
	DistParetoNormal: "paretonormal",
}

// String returns netem's name for the distribution.
func (d Distribution) String() string {
	if int(d) < len(distNames) {
		return distNames[d]
	}
	return "distribution(" + strconv.Itoa(int(d)) + ")"
}

var lossKindNames = [...]string{
	LossNone:    "none",
	LossRandom:  "random",
	LossGemodel: "gemodel",
	LossState:   "state",
}

// String returns netem's name for the loss model.
func (k LossKind) String() string {
	if int(k) < len(lossKindNames) {
		return lossKindNames[k]
	}
	return "loss(" + strconv.Itoa(int(k)) + ")"
}

// MaxDelay bounds link and impairment delays (and a jitter draw): an hour
// is far beyond any fabric, and keeps picosecond arithmetic in range.
const MaxDelay = sim.Second * 3600

// IsZero reports whether the impairment changes nothing.
func (i Impairment) IsZero() bool { return i == Impairment{} }

// Validate checks that probabilities lie in 0..1, times are not negative,
// the loss model's transition probabilities out of each state sum to at
// most 1, and the distribution is known.
func (i Impairment) Validate() error {
	var errs []error
	prob := func(name string, p float64) {
		if !(p >= 0 && p <= 1) { // also catches NaN
			errs = append(errs, fmt.Errorf("%s %v is not a probability in [0%%, 100%%]", name, p))
		}
	}
	switch i.Loss.Kind {
	case LossNone:
	case LossRandom:
		prob("loss random", i.Loss.P)
	case LossGemodel:
		prob("gemodel p", i.Loss.GEp)
		prob("gemodel r", i.Loss.GEr)
		prob("gemodel 1-h", i.Loss.GE1h)
		prob("gemodel 1-k", i.Loss.GE1k)
	case LossState:
		prob("state p13", i.Loss.P13)
		prob("state p31", i.Loss.P31)
		prob("state p32", i.Loss.P32)
		prob("state p23", i.Loss.P23)
		prob("state p14", i.Loss.P14)
		if i.Loss.P13+i.Loss.P14 > 1+1e-12 {
			errs = append(errs, errors.New("state: p13 + p14 exceed 100%"))
		}
		if i.Loss.P31+i.Loss.P32 > 1+1e-12 {
			errs = append(errs, errors.New("state: p31 + p32 exceed 100%"))
		}
	default:
		errs = append(errs, fmt.Errorf("unknown loss model %d", i.Loss.Kind))
	}
	if i.Delay < 0 || i.Jitter < 0 || i.Delay > MaxDelay || i.Jitter > MaxDelay {
		errs = append(errs, fmt.Errorf("delay %v jitter %v: want 0..%v", i.Delay, i.Jitter, MaxDelay))
	}
	if int(i.DelayDist) >= len(distNames) {
		errs = append(errs, fmt.Errorf("unknown distribution %d", i.DelayDist))
	}
	prob("duplicate", i.Duplicate)
	prob("corrupt", i.Corrupt)
	prob("reorder", i.Reorder)
	if i.Reorder > 0 && i.Delay == 0 {
		// tc refuses it too: reordered packets are the ones that skip
		// the delay.
		errs = append(errs, errors.New("reordering needs a delay (reorder P sends P of the packets without it)"))
	}
	if i.Rate != 0 && !(i.Rate >= 1 && i.Rate <= MaxRate) {
		errs = append(errs, fmt.Errorf("rate %v bit/s out of range [1bit, 100tbit]", i.Rate))
	}
	return errors.Join(errs...)
}

// String writes the impairment in netem's spelling, in a fixed order:
// delay (with jitter and distribution), loss, duplicate, corrupt, reorder,
// rate. The zero Impairment is "". ParseImpairment(i.String()) == i.
func (i Impairment) String() string {
	var b strings.Builder
	word := func(ws ...string) {
		for _, w := range ws {
			if b.Len() > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(w)
		}
	}
	if i.Delay != 0 || i.Jitter != 0 {
		word("delay", formatTime(i.Delay))
		if i.Jitter != 0 {
			word(formatTime(i.Jitter))
		}
	}
	if i.DelayDist != DistUniform {
		word("distribution", i.DelayDist.String())
	}
	l := i.Loss
	switch l.Kind {
	case LossRandom:
		word("loss", "random", formatPercent(l.P))
	case LossGemodel:
		word("loss", "gemodel", formatPercent(l.GEp), formatPercent(l.GEr), formatPercent(l.GE1h), formatPercent(l.GE1k))
	case LossState:
		word("loss", "state", formatPercent(l.P13), formatPercent(l.P31), formatPercent(l.P32), formatPercent(l.P23), formatPercent(l.P14))
	}
	if i.Duplicate != 0 {
		word("duplicate", formatPercent(i.Duplicate))
	}
	if i.Corrupt != 0 {
		word("corrupt", formatPercent(i.Corrupt))
	}
	if i.Reorder != 0 {
		word("reorder", formatPercent(i.Reorder))
	}
	if i.Rate != 0 {
		word("rate", FormatRate(i.Rate))
	}
	return b.String()
}

// ParseImpairment reads netem's spelling (tc-netem(8)), several clauses in
// one string as netem takes them:
//
//	delay TIME [JITTER] [distribution uniform|normal|pareto|paretonormal]
//	loss [random] PERCENT
//	loss gemodel p [r [1-h [1-k]]]      (defaults r=1-p, 1-h=100%, 1-k=0%)
//	loss state p13 [p31 [p32 [p23 [p14]]]] (defaults p31=1-p13, p32=0%, p23=100%, p14=0%)
//	duplicate PERCENT
//	corrupt PERCENT
//	reorder PERCENT
//	rate RATE
//
// Times take ns, us, ms or s (and tc's usec, msec, sec); a percentage may omit
// its "%" (tc reads a bare number as a percentage too). netem's correlation
// arguments, "gap", "limit", "slot" and "ecn" are not supported and are
// reported as errors. Errors name the offending word and its position.
func ParseImpairment(s string) (Impairment, error) {
	p := netemParser{src: s, words: strings.Fields(s)}
	imp, err := p.parse()
	if err != nil {
		return Impairment{}, err
	}
	if err := imp.Validate(); err != nil {
		return Impairment{}, fmt.Errorf("parsing impairment %q: %w", s, err)
	}
	return imp, nil
}

type netemParser struct {
	src   string
	words []string
	i     int
}

func (p *netemParser) errf(at int, format string, args ...any) error {
	w := "end of input"
	if at < len(p.words) {
		w = strconv.Quote(p.words[at])
	}
	return fmt.Errorf("parsing impairment %q: word %d (%s): %s", p.src, at+1, w, fmt.Sprintf(format, args...))
}

// next returns the next word, or "" at the end.
func (p *netemParser) peek() string {
	if p.i < len(p.words) {
		return p.words[p.i]
	}
	return ""
}

// nextIsNumber reports whether the next word starts like a number (netem's
// optional positional arguments).
func (p *netemParser) nextIsNumber() bool {
	w := p.peek()
	return w != "" && (w[0] >= '0' && w[0] <= '9' || w[0] == '.')
}

func (p *netemParser) percent(what string) (float64, error) {
	at := p.i
	if at >= len(p.words) {
		return 0, p.errf(at, "missing %s (a percentage)", what)
	}
	p.i++
	v, err := parsePercent(p.words[at])
	if err != nil {
		return 0, p.errf(at, "%s: %v", what, err)
	}
	return v, nil
}

func (p *netemParser) time(what string) (sim.Time, error) {
	at := p.i
	if at >= len(p.words) {
		return 0, p.errf(at, "missing %s (a time such as 10us)", what)
	}
	p.i++
	t, err := parseNetemTime(p.words[at])
	if err != nil {
		return 0, p.errf(at, "%s: %v", what, err)
	}
	return t, nil
}

func (p *netemParser) parse() (Impairment, error) {
	var imp Impairment
	seen := map[string]bool{}
	for p.i < len(p.words) {
		at := p.i
		kw := strings.ToLower(p.words[at])
		p.i++
		if seen[kw] {
			return imp, p.errf(at, "%s given twice", kw)
		}
		seen[kw] = true
		var err error
		switch kw {
		case "delay":
			if imp.Delay, err = p.time("delay"); err != nil {
				return imp, err
			}
			if p.nextIsNumber() {
				if imp.Jitter, err = p.time("jitter"); err != nil {
					return imp, err
				}
			}
			if p.nextIsNumber() {
				return imp, p.errf(p.i, "delay correlation is not supported")
			}
		case "distribution":
			at := p.i
			if at >= len(p.words) {
				return imp, p.errf(at, "missing distribution name")
			}
			p.i++
			found := false
			for d, name := range distNames {
				if strings.EqualFold(p.words[at], name) {
					imp.DelayDist, found = Distribution(d), true
				}
			}
			if !found {
				return imp, p.errf(at, "unknown distribution (want uniform, normal, pareto or paretonormal)")
			}
		case "loss", "drop":
			if err = p.loss(&imp.Loss); err != nil {
				return imp, err
			}
		case "duplicate":
			if imp.Duplicate, err = p.percent("duplicate probability"); err != nil {
				return imp, err
			}
		case "corrupt":
			if imp.Corrupt, err = p.percent("corrupt probability"); err != nil {
				return imp, err
			}
		case "reorder":
			if imp.Reorder, err = p.percent("reorder probability"); err != nil {
				return imp, err
			}
		case "rate":
			at := p.i
			if at >= len(p.words) {
				return imp, p.errf(at, "missing rate (such as 10gbit)")
			}
			p.i++
			if imp.Rate, err = ParseRate(p.words[at]); err != nil {
				return imp, p.errf(at, "%v", err)
			}
		default:
			return imp, p.errf(at, "unknown or unsupported netem keyword (want delay, distribution, loss, duplicate, corrupt, reorder or rate)")
		}
		if p.nextIsNumber() {
			return imp, p.errf(p.i, "unexpected extra argument to %s (netem correlations are not supported)", kw)
		}
	}
	return imp, nil
}

func (p *netemParser) loss(l *LossModel) error {
	var err error
	switch strings.ToLower(p.peek()) {
	case "random":
		p.i++
		fallthrough
	default:
		if !p.nextIsNumber() {
			return p.errf(p.i, "unknown loss model (want random, gemodel or state, or a percentage)")
		}
		l.Kind = LossRandom
		l.P, err = p.percent("loss probability")
		return err
	case "gemodel":
		p.i++
		l.Kind = LossGemodel
		if l.GEp, err = p.percent("gemodel p"); err != nil {
			return err
		}
		l.GEr, l.GE1h, l.GE1k = 1-l.GEp, 1, 0
		for _, f := range []struct {
			name string
			v    *float64
		}{{"gemodel r", &l.GEr}, {"gemodel 1-h", &l.GE1h}, {"gemodel 1-k", &l.GE1k}} {
			if !p.nextIsNumber() {
				break
			}
			if *f.v, err = p.percent(f.name); err != nil {
				return err
			}
		}
	case "state":
		p.i++
		l.Kind = LossState
		if l.P13, err = p.percent("state p13"); err != nil {
			return err
		}
		l.P31, l.P32, l.P23, l.P14 = 1-l.P13, 0, 1, 0
		for _, f := range []struct {
			name string
			v    *float64
		}{{"state p31", &l.P31}, {"state p32", &l.P32}, {"state p23", &l.P23}, {"state p14", &l.P14}} {
			if !p.nextIsNumber() {
				break
			}
			if *f.v, err = p.percent(f.name); err != nil {
				return err
			}
		}
	}
	return nil
}

// parsePercent reads "1%", "0.1%" or a bare "1" (also a percentage, as tc
// reads it) and returns a probability.
func parsePercent(w string) (float64, error) {
	num := strings.TrimSuffix(w, "%")
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || strings.ContainsAny(num, "xXpPiInN_") {
		return 0, fmt.Errorf("bad percentage %q", w)
	}
	if !(v >= 0 && v <= 100) {
		return 0, fmt.Errorf("percentage %q outside 0%%..100%%", w)
	}
	return v / 100, nil
}

// formatPercent writes p as a percentage with the fewest digits that parse
// back to exactly p.
func formatPercent(p float64) string {
	for prec := -1; prec <= 17; prec++ {
		if prec == 0 {
			continue
		}
		s := strconv.FormatFloat(p*100, 'g', prec, 64)
		if strings.ContainsAny(s, "e") {
			s = strconv.FormatFloat(p*100, 'f', -1, 64)
		}
		if back, err := parsePercent(s + "%"); err == nil && back == p {
			return s + "%"
		}
	}
	// p*100 rounding cannot always be undone exactly; fall back to the
	// closest value (off by at most one ulp).
	return strconv.FormatFloat(p*100, 'f', -1, 64) + "%"
}

// parseNetemTime reads a time in sim's spelling or tc's (usec, msec, sec,
// nsec).
func parseNetemTime(w string) (sim.Time, error) {
	for _, r := range [...]struct{ tc, sim string }{
		{"nsecs", "ns"}, {"nsec", "ns"}, {"usecs", "us"}, {"usec", "us"},
		{"msecs", "ms"}, {"msec", "ms"}, {"secs", "s"}, {"sec", "s"},
	} {
		if strings.HasSuffix(w, r.tc) {
			w = strings.TrimSuffix(w, r.tc) + r.sim
			break
		}
	}
	t, err := sim.ParseTime(w)
	if err != nil {
		return 0, err
	}
	if t < 0 || t > MaxDelay {
		return 0, fmt.Errorf("time %q out of range 0..%v", w, MaxDelay)
	}
	return t, nil
}

// formatTime writes t so that parseNetemTime reads back exactly t.
func formatTime(t sim.Time) string {
	s := t.String()
	if back, err := parseNetemTime(s); err == nil && back == t {
		return s
	}
	return strconv.FormatInt(int64(t), 10) + "ns"
}
