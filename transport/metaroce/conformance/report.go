package conformance

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"sort"
	"strings"
)

// Report is a whole run, as --json prints it.
type Report struct {
	Target string   `json:"target"`
	Tests  []Result `json:"tests"`
	// Passed, Failed (unexpected failures and unexpected passes),
	// XFailed (known failures) and Skipped count the tests.
	Passed  int `json:"passed"`
	Failed  int `json:"failed"`
	XFailed int `json:"xfailed"`
	Skipped int `json:"skipped"`
}

// NewReport counts a run's results.
func NewReport(target string, rs []Result) *Report {
	r := &Report{Target: target, Tests: rs}
	for i := range rs {
		switch {
		case rs[i].Unexpected():
			r.Failed++
		case rs[i].XFail != "":
			r.XFailed++
		case rs[i].Result == Skip:
			r.Skipped++
		default:
			r.Passed++
		}
	}
	return r
}

// OK reports whether the run had no unexpected result.
func (r *Report) OK() bool { return r.Failed == 0 }

// WriteText prints the human summary: failures in full, then counts per
// spec section and in all.
func (r *Report) WriteText(w io.Writer) error {
	bySection := map[string][4]int{}
	for _, t := range r.Tests {
		c := bySection[t.Section]
		switch {
		case t.Unexpected():
			c[1]++
			if t.XFail != "" {
				fmt.Fprintf(w, "FAIL  %-28s §%-3s passed, but is marked as a known failure (%s): remove the xfail\n", t.Name, t.Section, t.XFail)
			} else {
				fmt.Fprintf(w, "FAIL  %-28s §%-3s %s\n", t.Name, t.Section, t.Detail)
			}
		case t.XFail != "":
			c[2]++
			fmt.Fprintf(w, "XFAIL %-28s §%-3s known failure: %s\n", t.Name, t.Section, t.XFail)
		case t.Result == Skip:
			c[3]++
			fmt.Fprintf(w, "SKIP  %-28s §%-3s %s\n", t.Name, t.Section, t.Detail)
		default:
			c[0]++
		}
		bySection[t.Section] = c
	}
	secs := make([]string, 0, len(bySection))
	for s := range bySection {
		secs = append(secs, s)
	}
	sort.Slice(secs, func(i, j int) bool { return sectionLess(secs[i], secs[j]) })
	fmt.Fprintf(w, "\n%-8s %6s %6s %6s %6s\n", "section", "pass", "fail", "xfail", "skip")
	for _, s := range secs {
		c := bySection[s]
		fmt.Fprintf(w, "§%-7s %6d %6d %6d %6d\n", s, c[0], c[1], c[2], c[3])
	}
	verdict := "ok"
	if !r.OK() {
		verdict = "FAIL"
	}
	_, err := fmt.Fprintf(w, "%s: %d tests against %s: %d passed, %d failed, %d known failures, %d skipped\n",
		verdict, len(r.Tests), r.Target, r.Passed, r.Failed, r.XFailed, r.Skipped)
	return err
}

func sectionLess(a, b string) bool {
	var x, y int
	fmt.Sscan(a, &x)
	fmt.Sscan(b, &y)
	if x != y {
		return x < y
	}
	return a < b
}

// WriteJSON prints the run as JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	e := json.NewEncoder(w)
	e.SetIndent("", "  ")
	return e.Encode(r)
}

// WriteTAP prints the run in the Test Anything Protocol, version 13.
// Known failures are "not ok ... # TODO", skips "ok ... # SKIP".
func (r *Report) WriteTAP(w io.Writer) error {
	fmt.Fprintf(w, "TAP version 13\n1..%d\n", len(r.Tests))
	for i, t := range r.Tests {
		name := fmt.Sprintf("%s (§%s)", t.Name, t.Section)
		switch {
		case t.XFail != "":
			ok := "not ok"
			if t.Result != Fail {
				ok = "ok" // passed though marked: TODO tests that pass are reported by harnesses
			}
			fmt.Fprintf(w, "%s %d - %s # TODO %s\n", ok, i+1, name, tapEscape(t.XFail))
		case t.Result == Skip:
			fmt.Fprintf(w, "ok %d - %s # SKIP %s\n", i+1, name, tapEscape(t.Detail))
		case t.Result == Pass:
			fmt.Fprintf(w, "ok %d - %s\n", i+1, name)
		default:
			fmt.Fprintf(w, "not ok %d - %s\n  ---\n  message: %q\n  ...\n", i+1, name, t.Detail)
		}
	}
	return nil
}

func tapEscape(s string) string { return strings.ReplaceAll(s, "#", "\\#") }

// junitSuite is the JUnit XML schema's subset CI systems read.
type junitSuite struct {
	XMLName  xml.Name    `xml:"testsuite"`
	Name     string      `xml:"name,attr"`
	Tests    int         `xml:"tests,attr"`
	Failures int         `xml:"failures,attr"`
	Skipped  int         `xml:"skipped,attr"`
	Cases    []junitCase `xml:"testcase"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	Failure   *junitMessage `xml:"failure,omitempty"`
	Skipped   *junitMessage `xml:"skipped,omitempty"`
}

type junitMessage struct {
	Message string `xml:"message,attr"`
}

// WriteJUnit prints the run as JUnit XML: one test case per test, class
// name the spec section; known failures are skipped with their reason.
func (r *Report) WriteJUnit(w io.Writer) error {
	s := junitSuite{Name: "metaroce-conformance " + r.Target, Tests: len(r.Tests)}
	for _, t := range r.Tests {
		c := junitCase{Name: t.Name, Classname: "metaroce.section" + t.Section}
		switch {
		case t.Unexpected():
			msg := t.Detail
			if t.XFail != "" {
				msg = "passed, but marked as a known failure: " + t.XFail
			}
			c.Failure = &junitMessage{Message: msg}
			s.Failures++
		case t.XFail != "":
			c.Skipped = &junitMessage{Message: "known failure: " + t.XFail}
			s.Skipped++
		case t.Result == Skip:
			c.Skipped = &junitMessage{Message: t.Detail}
			s.Skipped++
		}
		s.Cases = append(s.Cases, c)
	}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	e := xml.NewEncoder(w)
	e.Indent("", "  ")
	if err := e.Encode(s); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}
