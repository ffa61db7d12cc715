package experiment

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/mrlab/mrlab/labs"
)

// WhatIf changes every bed of a run as mrlab sim's --set, --impair and
// --fault change one lab: "does the claim still hold at another rate?"
// without editing the beds. Each point applies it after the bed's own
// settings (and after the experiment's own --set and --impair), alike for
// every transport and fabric of the comparison, and its command carries
// it, so every row still reproduces. The values are spelled as on the
// command line.
type WhatIf struct {
	// Set are KEY=VALUE edits of any lab-file key.
	Set []string `json:"set,omitempty"`
	// Impair are TARGET=NETEM impairments.
	Impair []string `json:"impair,omitempty"`
	// Fault are faults added to the timeline, in a lab file's words
	// ("1ms link p0-leaf0-spine0 down").
	Fault []string `json:"fault,omitempty"`
}

// ErrWhatIf marks an error in a what-if: a flag that does not parse,
// touches what the experiment itself varies, or makes a bed invalid. The
// error names the flag (and the bed).
var ErrWhatIf = errors.New("what-if")

// IsZero reports whether w changes nothing.
func (w WhatIf) IsZero() bool { return len(w.Set) == 0 && len(w.Impair) == 0 && len(w.Fault) == 0 }

// Args returns w as mrlab arguments, in the order mrlab sim applies them:
// every --set, then every --impair, then every --fault.
func (w WhatIf) Args() []string {
	var a []string
	for _, kv := range w.Set {
		a = append(a, "--set", kv)
	}
	for _, kv := range w.Impair {
		a = append(a, "--impair", kv)
	}
	for _, f := range w.Fault {
		a = append(a, "--fault", f)
	}
	return a
}

// String spells w as shell arguments ("--set links.default.rate=25gbit
// --impair 'fabric=delay 5us'"), "" for none.
func (w WhatIf) String() string { return shellJoin(w.Args()) }

// with returns w's edits after o's.
func (w WhatIf) with(o WhatIf) WhatIf {
	return WhatIf{Set: slices.Concat(w.Set, o.Set), Impair: slices.Concat(w.Impair, o.Impair), Fault: slices.Concat(w.Fault, o.Fault)}
}

// overrides parses w into the lab edits mrlab sim makes of the same
// flags; a mistake names the flag.
func (w WhatIf) overrides() ([]labs.Override, error) {
	return labs.ParseOverrides(w.Set, w.Impair, w.Fault)
}

// A Knob is a lab setting an experiment sets itself, case by case or bed
// by bed. A what-if that touches it would change what the experiment
// compares, or make a row's label (its loss, its fabric) lie, so the
// experiment refuses it.
type Knob struct {
	// Name says what the setting is, and Why what the experiment does
	// with it.
	Name, Why string
	// Keys are the lab-file keys it lives under, dotted, * for any one
	// key and list indices left out ("links.*.rate" covers
	// links.default.rate and links.overrides[0].rate). A --set of a key
	// under one of them, or of a key that holds one (links.default),
	// touches the knob.
	Keys []string
	// Impairs: every --impair and every impair fault touch it (an
	// impairment replaces a link's own, it does not add to it).
	Impairs bool
	// Faults: every --fault, and --impair LINK:ab|ba (a fault at 0),
	// touch it.
	Faults bool
	// Hint says what to do instead.
	Hint string
}

// Describe spells k for help: "impairments (random loss): the loss it
// sweeps".
func (k Knob) Describe() string { return k.Name + ": " + k.Why }

// Refuses lists the flags that touch k: "--impair, --fault ... impair,
// --set impair, --set links.*.impair".
func (k Knob) Refuses() string {
	var out []string
	if k.Impairs {
		out = append(out, "--impair", "--fault ... impair")
	}
	if k.Faults {
		out = append(out, "--fault", "--impair LINK:ab|ba")
	}
	for _, key := range k.Keys {
		out = append(out, "--set "+key)
	}
	return strings.Join(out, ", ")
}

// The knobs experiments vary; each experiment says why.
func lossKnob(why string) Knob {
	return Knob{Name: "impairments (random loss)", Why: why, Keys: []string{"impair", "links.*.impair"}, Impairs: true,
		Hint: "change a link's propagation delay with --set links.default.delay=D (or links.host/links.fabric)"}
}

func pfcKnob(why string) Knob {
	return Knob{Name: "PFC", Why: why, Keys: []string{"links.*.pfc"},
		Hint: "set other link keys one by one (links.default.rate, links.default.queue, ...)"}
}

func rateKnob(why string) Knob {
	return Knob{Name: "the link rate", Why: why, Keys: []string{"links.*.rate"}}
}

func faultKnob(why string) Knob {
	return Knob{Name: "the fault timeline", Why: why, Keys: []string{"faults"}, Faults: true,
		Hint: "change when the fault fires or what it takes down in a lab file of your own and run it with mrlab sim"}
}

// fixedKnobs are refused by every experiment.
var fixedKnobs = []Knob{
	{Name: "the topology", Why: "every experiment picks its hosts, senders and measured links for its beds' shape", Keys: []string{"topology"},
		Hint: "reshape a bed in a lab file of your own and run it with mrlab sim"},
	{Name: "the seed", Why: "every point sets it", Keys: []string{"seed"}, Hint: "use --seed and --seeds"},
	{Name: "the beds' fault timelines", Why: "--set would edit or replace a bed's own faults", Keys: []string{"faults"},
		Hint: "add a fault to every bed with --fault 'AT TARGET NAME ACTION'"},
}

// FixedKnobs returns the settings no experiment takes a what-if for.
func FixedKnobs() []Knob { return slices.Clone(fixedKnobs) }

// check refuses w for e: a flag that does not parse, or one that touches
// a knob e varies (or one no experiment takes).
func (w WhatIf) check(e Experiment) error {
	ovs, err := w.overrides()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrWhatIf, err)
	}
	refuse := func(flag, holds string, k Knob, fixed bool) error {
		msg := fmt.Sprintf("%s: %s varies %s: %s", flag, e.Name, k.Name, k.Why)
		if fixed {
			msg = fmt.Sprintf("%s: an experiment takes no what-if for %s: %s", flag, k.Name, k.Why)
		}
		if holds != "" {
			msg += fmt.Sprintf("; the key holds %s: set the keys under it one by one", holds)
		} else if k.Hint != "" {
			msg += "; " + k.Hint
		}
		return fmt.Errorf("%w: %s", ErrWhatIf, msg)
	}
	// Fixed knobs first: the reason they are refused is the same for every
	// experiment.
	groups := []struct {
		knobs []Knob
		fixed bool
	}{{fixedKnobs, true}, {e.Varies, false}}
	for _, g := range groups {
		for _, k := range g.knobs {
			for _, kv := range w.Set {
				key, _, _ := strings.Cut(kv, "=")
				key = strings.TrimSpace(key)
				for _, pat := range k.Keys {
					if keyOverlaps(key, pat) {
						holds := ""
						if strings.Count(key, ".") < strings.Count(pat, ".") {
							holds = pat
						}
						return refuse("--set "+kv, holds, k, g.fixed)
					}
				}
			}
			for i, kv := range w.Impair {
				if k.Impairs || k.Faults && ovs[len(w.Set)+i].Faults > 0 {
					return refuse("--impair "+kv, "", k, g.fixed)
				}
			}
			for _, f := range w.Fault {
				if k.Faults || k.Impairs && faultImpairs(f) {
					return refuse("--fault "+f, "", k, g.fixed)
				}
			}
		}
	}
	return nil
}

// keyOverlaps reports whether --set of key touches the setting under
// pattern: one path holds the other ("links.default" holds
// "links.*.rate"; "links.default.rate.x" is under it).
func keyOverlaps(key, pattern string) bool {
	k := strings.Split(key, ".")
	p := strings.Split(pattern, ".")
	for i := 0; i < len(k) && i < len(p); i++ {
		name, _, _ := strings.Cut(k[i], "[") // links.overrides[0]
		if p[i] != "*" && p[i] != name {
			return false
		}
	}
	return true
}

// faultImpairs reports whether a --fault's action is impair (its fourth
// word, as FaultOverride reads it).
func faultImpairs(f string) bool {
	w := strings.Fields(f)
	return len(w) >= 4 && w[3] == labs.ActionImpair.String()
}

// checkBeds resolves every bed of pts with w applied, so that a what-if a
// bed cannot take fails before anything runs, naming the bed.
func (w WhatIf) checkBeds(e Experiment, pts []Point) error {
	ovs, err := w.overrides()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrWhatIf, err)
	}
	seen := map[string]bool{}
	for _, pt := range pts {
		if seen[pt.Lab] {
			continue
		}
		seen[pt.Lab] = true
		if _, err := labs.ResolveWith(pt.Lab, ovs); err != nil {
			return fmt.Errorf("%w: experiment %s, bed %s: %w", ErrWhatIf, e.Name, pt.Lab, err)
		}
	}
	return nil
}
