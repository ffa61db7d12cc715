package conformance

import (
	"fmt"
	"strings"

	"github.com/mrlab/mrlab/internal/sim"
)

// action runs an "iut" statement: an application action or a check of the
// IUT's end state.
func (r *runner) action(st *Stmt, at int64) (int64, error) {
	switch st.Verb {
	case "complete":
		return r.complete(st, at)
	case "nocomplete":
		span, err := fieldDur(st, "for", defaultWindow)
		if err != nil {
			return at, err
		}
		if err := r.advance(at + span); err != nil {
			return at, err
		}
		if err := r.pullCompletions(); err != nil {
			return at, err
		}
		if len(r.comps) > 0 {
			return at, fmt.Errorf("IUT completed %+v; the test expects no completion", r.comps[0])
		}
		return at + span, nil
	case "mem":
		end, err := r.settle(at)
		if err != nil {
			return at, err
		}
		return end, r.mem(st)
	case "counter":
		end, err := r.settle(at)
		if err != nil {
			return at, err
		}
		for _, f := range st.Fields {
			got, err := r.iut.Counter(f.Key)
			if err != nil {
				return at, err
			}
			if !r.matchValue(f, got, map[string]uint64{}) {
				return at, fmt.Errorf("counter %s is %d, want %s", f.Key, got, f.Val.String)
			}
		}
		return end, nil
	case "state":
		end, err := r.settle(at)
		if err != nil {
			return at, err
		}
		got, err := r.iut.State()
		if err != nil {
			return at, err
		}
		for _, f := range st.Fields {
			if f.Key != "is" {
				return at, fmt.Errorf("state takes is=STATE")
			}
			if got != f.Val.String {
				return at, fmt.Errorf("IUT connection is %s, want %s", got, f.Val.String)
			}
		}
		return end, nil
	}
	args := map[string]uint64{}
	for _, f := range st.Fields {
		v, err := r.b.value(f)
		if err != nil {
			return at, err
		}
		args[f.Key] = v
	}
	r.logf("iut %s", describe(st))
	if err := r.iut.Do(st.Verb, args); err != nil {
		return at, fmt.Errorf("iut %s: %w", st.Verb, err)
	}
	return at, nil
}

// settle lets a real network deliver what the tester sent before the IUT's
// end state is read: the IUT runs for the target's slack, and the script's
// clock moves on with it. On sim it does nothing.
func (r *runner) settle(at int64) (int64, error) {
	s := r.slack()
	if s == 0 {
		return at, nil
	}
	end := max(at, r.iut.Now()) + s
	return end, r.advance(end)
}

func (r *runner) pullCompletions() error {
	c, err := r.iut.Completions()
	if err != nil {
		return err
	}
	for _, wc := range c {
		r.logf("completion %+v", wc)
	}
	r.comps = append(r.comps, c...)
	return nil
}

// complete waits for a completion matching every field.
func (r *runner) complete(st *Stmt, at int64) (int64, error) {
	within, err := fieldDur(st, "within", defaultWindow)
	if err != nil {
		return at, err
	}
	deadline := at + within + r.slack()
	for {
		if err := r.pullCompletions(); err != nil {
			return at, err
		}
		for i, c := range r.comps {
			if ok, err := r.matchCompletion(c, st.Fields); err != nil {
				return at, err
			} else if ok {
				r.comps = append(r.comps[:i], r.comps[i+1:]...)
				return max(at, r.iut.Now()), nil
			}
		}
		if r.iut.Now() >= deadline {
			var seen []string
			for _, c := range r.comps {
				seen = append(seen, fmt.Sprintf("%+v", c))
			}
			return at, fmt.Errorf("expected completion %s within %s; unmatched completions: [%s]",
				describe(st), sim.Time(within), strings.Join(seen, ", "))
		}
		sent, err := r.iut.Run(deadline)
		if err != nil {
			return at, err
		}
		r.collect(sent)
	}
}

func (r *runner) matchCompletion(c Completion, fields []Field) (bool, error) {
	for _, f := range fields {
		switch f.Key {
		case "within":
		case "status":
			want := strings.TrimPrefix(f.Val.String, "!")
			if _, ok := statusNames[want]; !ok {
				return false, fmt.Errorf("unknown status %q", want)
			}
			if (c.Status == want) == f.Val.Not {
				return false, nil
			}
		case "op":
			if _, ok := opNames[f.Val.String]; !ok {
				return false, fmt.Errorf("unknown completion op %q", f.Val.String)
			}
			if c.Op != f.Val.String {
				return false, nil
			}
		default:
			var got uint64
			switch f.Key {
			case "id":
				got = c.ID
			case "bytes":
				got = uint64(c.Bytes)
			case "imm":
				got = uint64(c.Imm)
			case "stream":
				got = uint64(c.Stream)
			case "hasimm":
				got = b2u(c.HasImm)
			default:
				return false, fmt.Errorf("a completion has no field %q", f.Key)
			}
			if !r.matchValue(f, got, map[string]uint64{}) {
				return false, nil
			}
		}
	}
	return true, nil
}

// mem checks IUT memory: key (default the RW region's), addr, len, and
// seed=S (the pattern the tester writes, from message offset off) or
// fill=B.
func (r *runner) mem(st *Stmt) error {
	a := map[string]uint64{"key": KeyRW, "off": 0}
	useSeed := false
	for _, f := range st.Fields {
		v, err := r.b.value(f)
		if err != nil {
			return err
		}
		a[f.Key] = v
		useSeed = useSeed || f.Key == "seed"
	}
	if _, ok := a["addr"]; !ok {
		return fmt.Errorf("mem needs addr= and len=")
	}
	n := int(a["len"])
	if n <= 0 || n > 1<<20 {
		return fmt.Errorf("mem len=%d not in 1..1MiB", n)
	}
	got, err := r.iut.Mem(uint32(a["key"]), a["addr"], n)
	if err != nil {
		return err
	}
	return memCheck(got, a["seed"], useSeed, byte(a["fill"]), int(a["off"]))
}
