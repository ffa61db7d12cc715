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
