package conformance

import (
	"os"
	"strings"
	"testing"
)

// TestDocsListEveryTest: docs/conformance.md names every built-in test
// under its section, so the list cannot drift from the scripts.
func TestDocsListEveryTest(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/conformance.md")
	if err != nil {
		t.Fatal(err)
	}
	all, err := Builtin()
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	for _, s := range all {
		head := strings.Index(text, "### §"+s.Section+". ")
		if head < 0 {
			t.Errorf("docs/conformance.md has no heading for §%s", s.Section)
			continue
		}
		end := strings.Index(text[head+4:], "\n### ")
		body := text[head:]
		if end >= 0 {
			body = text[head : head+4+end]
		}
		if !strings.Contains(body, "`"+s.Name+"`") {
			t.Errorf("docs/conformance.md does not list %s under §%s", s.Name, s.Section)
		}
	}
}

// TestDocsRulesNameRealTests: the rules table names only tests that exist,
// and every test checks at least one rule in it.
func TestDocsRulesNameRealTests(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/conformance.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	i, j := strings.Index(text, "## Rules of the spec"), strings.Index(text, "## Tests by spec section")
	if i < 0 || j < i {
		t.Fatal("docs/conformance.md lacks its rules table")
	}
	table := text[i:j]
	all, err := Builtin()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, s := range all {
		names[s.Name] = true
		if !strings.Contains(table, "`"+s.Name+"`") {
			t.Errorf("rules table: no rule names test %s", s.Name)
		}
	}
	for _, line := range strings.Split(table, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 4 {
			continue
		}
		quoted := strings.Split(cells[3], "`")
		for k := 1; k < len(quoted); k += 2 {
			if !names[quoted[k]] {
				t.Errorf("rules table names %q, which is no test", quoted[k])
			}
		}
	}
}
