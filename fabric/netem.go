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

// maxOverhead bounds netem's rate overheads and cell size, in bytes;
// maxSlotCount a slot's packets and bytes.
const (
	maxOverhead  = 1 << 16
	maxSlotCount = 1 << 30
)

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
	prob("loss correlation", i.Loss.Corr)
	prob("delay correlation", i.DelayCorr)
	prob("duplicate correlation", i.DupCorr)
	prob("corrupt correlation", i.CorruptCorr)
	prob("reorder correlation", i.ReorderCorr)
	if i.Loss.Corr != 0 && i.Loss.Kind != LossRandom {
		errs = append(errs, errors.New("only random loss takes a correlation"))
	}
	if i.ECN && i.Loss.Kind == LossNone {
		errs = append(errs, errors.New("ecn marks what a loss model would drop: give a loss model"))
	}
	if (i.RateOverhead != 0 || i.CellSize != 0 || i.CellOverhead != 0) && i.Rate == 0 {
		errs = append(errs, errors.New("packet and cell overheads belong to a rate"))
	}
	if abs(float64(i.RateOverhead)) > maxOverhead || i.CellSize < 0 || i.CellSize > maxOverhead || abs(float64(i.CellOverhead)) > maxOverhead {
		errs = append(errs, fmt.Errorf("rate overheads and cell size: want at most %d bytes (cell size not negative)", maxOverhead))
	}
	if i.CellSize > 0 && i.CellSize+i.CellOverhead <= 0 {
		errs = append(errs, errors.New("a cell with its overhead must be at least one byte"))
	}
	sl := i.Slot
	switch {
	case sl.Min < 0 || sl.Max < 0 || sl.Delay < 0 || sl.Jitter < 0 || sl.Max > MaxDelay || sl.Delay > MaxDelay || sl.Jitter > MaxDelay:
		errs = append(errs, fmt.Errorf("slot times: want 0..%v", MaxDelay))
	case sl.Max < sl.Min:
		errs = append(errs, fmt.Errorf("slot max delay %v below min %v", sl.Max, sl.Min))
	case sl.Packets < 0 || sl.Bytes < 0 || sl.Packets > maxSlotCount || sl.Bytes > maxSlotCount:
		errs = append(errs, fmt.Errorf("slot packets and bytes: want 0..%d", maxSlotCount))
	case sl.UseDist && sl.Jitter <= 0:
		errs = append(errs, errors.New("slot distribution needs a positive jitter"))
	case !sl.UseDist && (sl.Dist != DistUniform || sl.Delay != 0 || sl.Jitter != 0):
		errs = append(errs, errors.New("slot delay and jitter go with slot distribution"))
	case !sl.IsZero() && !sl.UseDist && sl.Max == 0:
		errs = append(errs, errors.New("slot needs a delay (slot MIN [MAX])"))
	}
	if int(sl.Dist) >= len(distNames) {
		errs = append(errs, fmt.Errorf("unknown slot distribution %d", sl.Dist))
	}
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
// delay (with jitter, correlation and distribution), loss (with its
// correlation, then ecn), duplicate, corrupt, reorder, rate (with its
// overheads), slot. The zero Impairment is "".
// ParseImpairment(i.String()) == i.
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
	if i.Delay != 0 || i.Jitter != 0 || i.DelayCorr != 0 {
		word("delay", formatTime(i.Delay))
		if i.Jitter != 0 || i.DelayCorr != 0 {
			word(formatTime(i.Jitter))
		}
		if i.DelayCorr != 0 {
			word(formatPercent(i.DelayCorr))
		}
	}
	if i.DelayDist != DistUniform {
		word("distribution", i.DelayDist.String())
	}
	l := i.Loss
	switch l.Kind {
	case LossRandom:
		word("loss", "random", formatPercent(l.P))
		if l.Corr != 0 {
			word(formatPercent(l.Corr))
		}
	case LossGemodel:
		word("loss", "gemodel", formatPercent(l.GEp), formatPercent(l.GEr), formatPercent(l.GE1h), formatPercent(l.GE1k))
	case LossState:
		word("loss", "state", formatPercent(l.P13), formatPercent(l.P31), formatPercent(l.P32), formatPercent(l.P23), formatPercent(l.P14))
	}
	if i.ECN {
		word("ecn")
	}
	withCorr := func(name string, p, c float64) {
		if p != 0 || c != 0 {
			word(name, formatPercent(p))
			if c != 0 {
				word(formatPercent(c))
			}
		}
	}
	withCorr("duplicate", i.Duplicate, i.DupCorr)
	withCorr("corrupt", i.Corrupt, i.CorruptCorr)
	withCorr("reorder", i.Reorder, i.ReorderCorr)
	if i.Rate != 0 {
		word("rate", FormatRate(i.Rate))
		if i.RateOverhead != 0 || i.CellSize != 0 || i.CellOverhead != 0 {
			word(strconv.Itoa(i.RateOverhead))
		}
		if i.CellSize != 0 || i.CellOverhead != 0 {
			word(strconv.Itoa(i.CellSize))
		}
		if i.CellOverhead != 0 {
			word(strconv.Itoa(i.CellOverhead))
		}
	}
	if sl := i.Slot; !sl.IsZero() {
		if sl.UseDist {
			word("slot", "distribution", sl.Dist.String(), formatTime(sl.Delay), formatTime(sl.Jitter))
		} else {
			word("slot", formatTime(sl.Min))
			if sl.Max != sl.Min {
				word(formatTime(sl.Max))
			}
		}
		if sl.Packets != 0 {
			word("packets", strconv.Itoa(sl.Packets))
		}
		if sl.Bytes != 0 {
			word("bytes", strconv.Itoa(sl.Bytes))
		}
	}
	return b.String()
}

// ParseImpairment reads netem's spelling (tc-netem(8)), several clauses in
// one string as netem takes them:
//
//	delay TIME [JITTER [CORRELATION]] [distribution uniform|normal|pareto|paretonormal]
//	loss [random] PERCENT [CORRELATION]
//	loss gemodel p [r [1-h [1-k]]]      (defaults r=1-p, 1-h=100%, 1-k=0%)
//	loss state p13 [p31 [p32 [p23 [p14]]]] (defaults p31=1-p13, p32=0%, p23=100%, p14=0%)
//	ecn                                 (mark instead of drop what the loss model picks)
//	duplicate PERCENT [CORRELATION]
//	corrupt PERCENT [CORRELATION]
//	reorder PERCENT [CORRELATION]
//	rate RATE [PACKETOVERHEAD [CELLSIZE [CELLOVERHEAD]]]
//	slot MIN_DELAY [MAX_DELAY] [packets N] [bytes N]
//	slot distribution uniform|normal|pareto|paretonormal DELAY JITTER [packets N] [bytes N]
//
// Times take ns, us, ms or s (and tc's usec, msec, sec); a percentage may omit
// its "%" (tc reads a bare number as a percentage too). netem's "gap",
// "limit" and "seed" are not supported (randomness comes from the lab's
// seed) and are reported as errors, as are custom distribution files.
// Errors name the offending word and its position.
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
		case "delay", "latency":
			if imp.Delay, err = p.time("delay"); err != nil {
				return imp, err
			}
			if p.nextIsNumber() {
				if imp.Jitter, err = p.time("jitter"); err != nil {
					return imp, err
				}
				if imp.DelayCorr, err = p.correlation(); err != nil {
					return imp, err
				}
			}
		case "distribution":
			if imp.DelayDist, err = p.distribution(); err != nil {
				return imp, err
			}
		case "loss", "drop":
			if err = p.loss(&imp.Loss); err != nil {
				return imp, err
			}
		case "ecn":
			imp.ECN = true
		case "duplicate":
			if imp.Duplicate, err = p.percent("duplicate probability"); err != nil {
				return imp, err
			}
			if imp.DupCorr, err = p.correlation(); err != nil {
				return imp, err
			}
		case "corrupt":
			if imp.Corrupt, err = p.percent("corrupt probability"); err != nil {
				return imp, err
			}
			if imp.CorruptCorr, err = p.correlation(); err != nil {
				return imp, err
			}
		case "reorder":
			if imp.Reorder, err = p.percent("reorder probability"); err != nil {
				return imp, err
			}
			if imp.ReorderCorr, err = p.correlation(); err != nil {
				return imp, err
			}
		case "rate":
			if err = p.rate(&imp); err != nil {
				return imp, err
			}
		case "slot":
			if err = p.slot(&imp.Slot); err != nil {
				return imp, err
			}
		case "gap", "limit", "seed":
			return imp, p.errf(at, "netem's %s is not supported (queues are the link's; randomness comes from the lab's seed)", kw)
		default:
			return imp, p.errf(at, "unknown or unsupported netem keyword (want delay, distribution, loss, ecn, duplicate, corrupt, reorder, rate or slot)")
		}
		if p.nextIsNumber() {
			return imp, p.errf(p.i, "unexpected extra argument to %s", kw)
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
		if l.P, err = p.percent("loss probability"); err != nil {
			return err
		}
		l.Corr, err = p.correlation()
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

// correlation reads netem's optional CORRELATION percentage, 0 if absent.
func (p *netemParser) correlation() (float64, error) {
	if !p.nextIsNumber() {
		return 0, nil
	}
	return p.percent("correlation")
}

// distribution reads a distribution name.
func (p *netemParser) distribution() (Distribution, error) {
	at := p.i
	if at >= len(p.words) {
		return 0, p.errf(at, "missing distribution name")
	}
	p.i++
	for d, name := range distNames {
		if strings.EqualFold(p.words[at], name) {
			return Distribution(d), nil
		}
	}
	return 0, p.errf(at, "unknown distribution (want uniform, normal, pareto or paretonormal; custom tables are not supported)")
}

// integer reads a whole number for what, signed if signed, of magnitude
// at most limit.
func (p *netemParser) integer(what string, signed bool, limit int) (int, error) {
	at := p.i
	if at >= len(p.words) {
		return 0, p.errf(at, "missing %s", what)
	}
	p.i++
	n, err := strconv.Atoi(p.words[at])
	if err != nil || (!signed && n < 0) || n > limit || n < -limit {
		return 0, p.errf(at, "%s: want a whole number (magnitude at most %d)", what, limit)
	}
	return n, nil
}

// nextIsSigned reports whether the next word starts like a number that may
// be negative (the rate's overheads).
func (p *netemParser) nextIsSigned() bool {
	w := p.peek()
	return p.nextIsNumber() || len(w) > 1 && w[0] == '-' && w[1] >= '0' && w[1] <= '9'
}

// rate reads RATE [PACKETOVERHEAD [CELLSIZE [CELLOVERHEAD]]].
func (p *netemParser) rate(imp *Impairment) error {
	at := p.i
	if at >= len(p.words) {
		return p.errf(at, "missing rate (such as 10gbit)")
	}
	p.i++
	var err error
	if imp.Rate, err = ParseRate(p.words[at]); err != nil {
		return p.errf(at, "%v", err)
	}
	if !p.nextIsSigned() {
		return nil
	}
	// As tc reads them: a signed overhead, an unsigned cell size, a signed
	// cell overhead, each optional after the one before.
	if imp.RateOverhead, err = p.integer("rate packet overhead", true, maxOverhead); err != nil {
		return err
	}
	if p.nextIsNumber() {
		if imp.CellSize, err = p.integer("rate cell size", false, maxOverhead); err != nil {
			return err
		}
	}
	if p.nextIsSigned() {
		imp.CellOverhead, err = p.integer("rate cell overhead", true, maxOverhead)
	}
	return err
}

// slot reads MIN [MAX] or distribution DIST DELAY JITTER, then optional
// packets N and bytes N.
func (p *netemParser) slot(sl *Slot) error {
	var err error
	if p.nextIsNumber() {
		if sl.Min, err = p.time("slot min delay"); err != nil {
			return err
		}
		sl.Max = sl.Min
		if p.nextIsNumber() {
			at := p.i
			if sl.Max, err = p.time("slot max delay"); err != nil {
				return err
			}
			if sl.Max < sl.Min {
				return p.errf(at, "slot max delay below the min delay")
			}
		}
	} else {
		if !strings.EqualFold(p.peek(), "distribution") {
			return p.errf(p.i, "want slot MIN_DELAY [MAX_DELAY] or slot distribution DIST DELAY JITTER")
		}
		p.i++
		sl.UseDist = true
		if sl.Dist, err = p.distribution(); err != nil {
			return err
		}
		if sl.Delay, err = p.time("slot delay"); err != nil {
			return err
		}
		at := p.i
		if sl.Jitter, err = p.time("slot jitter"); err != nil {
			return err
		}
		if sl.Jitter <= 0 {
			return p.errf(at, "slot jitter must be positive")
		}
	}
	for _, opt := range []struct {
		name string
		v    *int
	}{{"packets", &sl.Packets}, {"bytes", &sl.Bytes}} {
		if !strings.EqualFold(p.peek(), opt.name) {
			continue
		}
		p.i++
		at := p.i
		if *opt.v, err = p.integer("slot "+opt.name, false, maxSlotCount); err != nil {
			return err
		}
		if *opt.v == 0 {
			return p.errf(at, "slot %s must be at least 1", opt.name)
		}
	}
	return nil
}

// parsePercent reads "1%", "0.1%" or a bare "1" (also a percentage, as tc
// reads it) and returns a probability: the float64 nearest the decimal
// value divided by 100 (parsed as "1e-2", so formatPercent's digits come
// back exactly).
func parsePercent(w string) (float64, error) {
	num := strings.TrimSuffix(w, "%")
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || strings.ContainsAny(num, "xXpPiInN_") {
		return 0, fmt.Errorf("bad percentage %q", w)
	}
	if !(v >= 0 && v <= 100) {
		return 0, fmt.Errorf("percentage %q outside 0%%..100%%", w)
	}
	if strings.ContainsAny(num, "eE") {
		return v / 100, nil
	}
	return strconv.ParseFloat(num+"e-2", 64)
}

// formatPercent writes p as a percentage that parsePercent reads back as
// exactly p: p's shortest decimal digits with the point moved two places.
func formatPercent(p float64) string {
	s := strconv.FormatFloat(p, 'f', -1, 64)
	intPart, frac, _ := strings.Cut(s, ".")
	frac += "00"
	intPart = strings.TrimLeft(intPart+frac[:2], "0")
	if intPart == "" {
		intPart = "0"
	}
	if frac = strings.TrimRight(frac[2:], "0"); frac != "" {
		return intPart + "." + frac + "%"
	}
	return intPart + "%"
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
