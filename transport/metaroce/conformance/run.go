package conformance

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/mrlab/mrlab/internal/sim"
	"github.com/mrlab/mrlab/transport/metaroce/wire"
)

// Results a test can have.
const (
	Pass = "pass"
	Fail = "fail"
	Skip = "skip"
)

// Result is one test's outcome.
type Result struct {
	Name    string `json:"name"`
	Section string `json:"section"`
	Summary string `json:"summary,omitempty"`
	Result  string `json:"result"` // pass, fail or skip
	// XFail is set on a known failure of the IUT (the script's reason):
	// Result is still "fail", but it does not fail the run.
	XFail  string `json:"xfail,omitempty"`
	Detail string `json:"detail,omitempty"`
	Line   int    `json:"line,omitempty"` // the statement that failed
}

// Unexpected reports whether the result should fail the run: a failure
// not marked expected, or a pass of a test marked as a known failure.
func (r *Result) Unexpected() bool {
	if r.XFail != "" {
		return r.Result != Fail
	}
	return r.Result == Fail
}

// defaultWindow is how long an expectation waits when it names no window.
const defaultWindow = int64(sim.Millisecond)

// pending is an IUT packet not yet matched by an expectation.
type pending struct {
	Sent
	v    *view
	used bool
}

type runner struct {
	iut   IUT
	s     *Script
	b     builder
	pkts  []*pending
	comps []Completion
	trace io.Writer
}

// errSkip marks a test the target cannot run.
type errSkip struct{ why string }

func (e errSkip) Error() string { return e.why }

// Unsupported returns the error a Target or IUT gives for a test it cannot run
// (a setting or counter it lacks): the runner reports the test skipped
// with why, not failed.
func Unsupported(why string) error { return errSkip{why} }

// Run runs one script against a fresh IUT from target. trace, if not nil,
// gets every packet both ways.
func Run(target Target, s *Script, trace io.Writer) Result {
	res := Result{Name: s.Name, Section: s.Section, Summary: s.Summary, XFail: s.XFail}
	settings := map[string]uint64{}
	for _, f := range s.IUT {
		settings[f.Key] = f.Val.N
	}
	iut, err := target.Open(settings)
	if err != nil {
		var sk errSkip
		if errors.As(err, &sk) {
			res.Result, res.Detail = Skip, sk.why
			return res
		}
		res.Result, res.Detail = Fail, fmt.Sprintf("opening the IUT: %v", err)
		return res
	}
	defer iut.Close()
	r := &runner{iut: iut, s: s, trace: trace,
		b: builder{vars: map[string]uint64{}, nextPSN: map[uint16]uint32{}}}
	var prev int64
	for i := range s.Stmts {
		st := &s.Stmts[i]
		at := int64(st.At)
		if st.Rel {
			at += prev
		}
		end, err := r.exec(st, at)
		if err != nil {
			res.Line = st.Line
			var sk errSkip
			if errors.As(err, &sk) {
				res.Result, res.Detail = Skip, fmt.Sprintf("line %d: %s", st.Line, sk.why)
				return res
			}
			res.Result, res.Detail = Fail, fmt.Sprintf("line %d: %v", st.Line, err)
			return res
		}
		prev = end
	}
	res.Result = Pass
	return res
}

// slacker is an IUT whose expectation windows get extra time: a real
// network and a loaded machine add latency no script can foresee.
type slacker interface{ Slack() int64 }

func (r *runner) slack() int64 {
	if s, ok := r.iut.(slacker); ok {
		return s.Slack()
	}
	return 0
}

func (r *runner) logf(format string, args ...any) {
	if r.trace != nil {
		fmt.Fprintf(r.trace, "%12s  %s\n", sim.Time(r.iut.Now()), fmt.Sprintf(format, args...))
	}
}

// advance lets the IUT run until t, collecting what it sends.
// Events due at t itself run too, so "for=0" sees what the last
// statement caused at once.
func (r *runner) advance(t int64) error {
	for {
		sent, err := r.iut.Run(t)
		if err != nil {
			return err
		}
		r.collect(sent)
		if r.iut.Now() >= t && len(sent) == 0 {
			return nil
		}
	}
}

func (r *runner) collect(sent []Sent) {
	for _, s := range sent {
		p := &pending{Sent: s, v: decode(&s)}
		r.pkts = append(r.pkts, p)
		if r.trace != nil {
			fmt.Fprintf(r.trace, "%12s  > %v sport=%d\n", sim.Time(s.At), p.v, s.SrcPort)
		}
	}
}

func fieldDur(st *Stmt, key string, def int64) (int64, error) {
	for _, f := range st.Fields {
		if f.Key == key {
			if f.Val.Kind != Exact {
				return 0, fmt.Errorf("%s=%s: want a duration", key, f.Val.String)
			}
			return int64(f.Val.N), nil
		}
	}
	return def, nil
}

// exec runs one statement at time at and returns the time the next
// relative statement counts from.
func (r *runner) exec(st *Stmt, at int64) (int64, error) {
	if err := r.advance(at); err != nil {
		return at, err
	}
	switch st.Kind {
	case Flush:
		for _, p := range r.pkts {
			p.used = true
		}
		r.comps = r.comps[:0]
		return at, nil
	case Inject:
		r.b.now = at
		pkt, m, err := r.b.build(st)
		if err != nil {
			return at, err
		}
		if r.trace != nil {
			fmt.Fprintf(r.trace, "%12s  < %v\n", sim.Time(r.iut.Now()), decode(&Sent{Bytes: pkt, SrcPort: m.SrcPort}))
		}
		return at, r.iut.Inject(pkt, m)
	case Expect:
		return r.expect(st, at)
	case Refute:
		return r.refute(st, at)
	}
	return r.action(st, at)
}

func (r *runner) expect(st *Stmt, at int64) (int64, error) {
	within, err := fieldDur(st, "within", defaultWindow)
	if err != nil {
		return at, err
	}
	after, err := fieldDur(st, "after", -1)
	if err != nil {
		return at, err
	}
	typ, _ := typeByName(st.Verb)
	deadline := at + within + r.slack()
	for {
		for _, p := range r.pkts {
			if p.used || p.v.typ != typ {
				continue
			}
			binds, ok := r.match(p.v, st.Fields)
			if !ok {
				continue
			}
			if p.v.err != nil {
				return at, fmt.Errorf("IUT sent a malformed %s: %v", typ, p.v)
			}
			if after >= 0 && p.At < at+after {
				return at, fmt.Errorf("%s came %s after the statement, before the %s it must wait: %v",
					typ, sim.Time(p.At-at), sim.Time(after), p.v)
			}
			p.used = true
			for k, v := range binds {
				r.b.vars[k] = v
			}
			return max(at, p.At), nil
		}
		if r.iut.Now() >= deadline {
			return at, fmt.Errorf("expected %s within %s: %s", describe(st), sim.Time(within), r.seen(typ))
		}
		sent, err := r.iut.Run(deadline)
		if err != nil {
			return at, err
		}
		r.collect(sent)
	}
}

func (r *runner) refute(st *Stmt, at int64) (int64, error) {
	span, err := fieldDur(st, "for", defaultWindow)
	if err != nil {
		return at, err
	}
	if err := r.advance(at + span); err != nil {
		return at, err
	}
	typ, _ := typeByName(st.Verb)
	for _, p := range r.pkts {
		if p.used || p.v.typ != typ || p.At < at {
			continue
		}
		if _, ok := r.match(p.v, st.Fields); ok {
			return at, fmt.Errorf("IUT sent %v %s after the statement; the test forbids %s", p.v, sim.Time(p.At-at), describe(st))
		}
	}
	return at + span, nil
}

// seen lists the unmatched packets of a type the IUT sent, for a failure.
func (r *runner) seen(typ wire.Type) string {
	var out []string
	for _, p := range r.pkts {
		if !p.used && p.v.typ == typ {
			out = append(out, fmt.Sprintf("[%s] %v", sim.Time(p.At), p.v))
		}
	}
	if len(out) == 0 {
		return "the IUT sent no unmatched " + typ.String()
	}
	if len(out) > 4 {
		out = append(out[:2], fmt.Sprintf("... %d more ...", len(out)-3), out[len(out)-1])
	}
	return "unmatched " + typ.String() + "s: " + strings.Join(out, "; ")
}

func describe(st *Stmt) string {
	var b strings.Builder
	b.WriteString(st.Verb)
	for _, f := range st.Fields {
		if f.Key == "within" || f.Key == "after" || f.Key == "for" {
			continue
		}
		fmt.Fprintf(&b, " %s=%s", f.Key, f.Val.String)
	}
	return b.String()
}

// width masks a field's value for comparison with wraparound.
func width(key string) uint64 {
	switch key {
	case "addr", "nonce":
		return ^uint64(0)
	}
	return 0xffffffff
}

// match checks every field of an expectation against a packet and returns
// the variables it would bind.
func (r *runner) match(v *view, fields []Field) (map[string]uint64, bool) {
	binds := map[string]uint64{}
	for _, f := range fields {
		switch f.Key {
		case "within", "after", "for":
			continue
		case "sack":
			if f.Val.Kind == Any {
				continue
			}
			want, err := parseSACK(f.Val.String)
			if err != nil || want != v.sack {
				return nil, false
			}
			continue
		case "pathack":
			if !matchPathAck(v, f.Val.String) {
				return nil, false
			}
			continue
		case "seed":
			for i, c := range v.payload {
				if c != pattern(f.Val.N, int(v.f["offset"])+i) {
					return nil, false
				}
			}
			continue
		}
		got, ok := v.f[f.Key]
		if !ok {
			return nil, false
		}
		if !r.matchValue(f, got, binds) {
			return nil, false
		}
	}
	return binds, true
}

func (r *runner) matchValue(f Field, got uint64, binds map[string]uint64) bool {
	if f.Val.Not {
		g := f
		g.Val.Not = false
		if g.Val.Kind == Var {
			if _, ok := r.b.vars[g.Val.Name]; !ok {
				return false
			}
		}
		return !r.matchValue(g, got, binds)
	}
	w := width(f.Key)
	switch f.Val.Kind {
	case Any:
		return true
	case Exact:
		return got == f.Val.N
	case Range:
		return got >= f.Val.N && got <= f.Val.Hi
	case Var:
		if x, ok := r.b.vars[f.Val.Name]; ok {
			return (x+f.Val.N)&w == got&w
		}
		if x, ok := binds[f.Val.Name]; ok {
			return (x+f.Val.N)&w == got&w
		}
		binds[f.Val.Name] = (got - f.Val.N) & w
		return true
	}
	return false
}

// matchPathAck checks that an ACK reports path/gen/cum/sackbits in its
// fixed part or one of its records; any part may be *.
func matchPathAck(v *view, spec string) bool {
	parts := strings.Split(spec, "/")
	if len(parts) != 4 {
		return false
	}
	fixed := wire.PathAck{Path: uint8(v.f["path"]), Gen: uint8(v.f["gen"]), Cum: uint32(v.f["cum"]), SACK: v.sack}
	for _, pa := range append([]wire.PathAck{fixed}, v.records...) {
		if partOK(parts[0], uint64(pa.Path)) && partOK(parts[1], uint64(pa.Gen)) && partOK(parts[2], uint64(pa.Cum)) &&
			(parts[3] == "*" || sackIs(parts[3], &pa.SACK)) {
			return true
		}
	}
	return false
}

func partOK(s string, x uint64) bool {
	if s == "*" {
		return true
	}
	n, err := parseNum(s)
	return err == nil && n == x
}

func sackIs(s string, got *[4]uint64) bool {
	want, err := parseSACK(s)
	return err == nil && want == *got
}

// memCheck compares IUT memory with what a mem statement expects.
func memCheck(got []byte, seed uint64, useSeed bool, fill byte, off int) error {
	want := make([]byte, len(got))
	for i := range want {
		if useSeed {
			want[i] = pattern(seed, off+i)
		} else {
			want[i] = fill
		}
	}
	if bytes.Equal(got, want) {
		return nil
	}
	for i := range got {
		if got[i] != want[i] {
			return fmt.Errorf("memory differs at byte %d: got %#02x, want %#02x", i, got[i], want[i])
		}
	}
	return nil
}
