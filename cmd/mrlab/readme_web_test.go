package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestReadmeWebExampleReachesItsFaults runs the README's web example (its
// command without --web, which only serves the recording) and checks
// every fault of the lab's timeline fired during the run.
func TestReadmeWebExampleReachesItsFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 10 ms of the default lab")
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go run \./cmd/mrlab (sim leafspine-faults [^#\n]*?) --web\b`).FindSubmatch(readme)
	if m == nil {
		t.Fatal("README has no `go run ./cmd/mrlab sim leafspine-faults ... --web` example")
	}
	args := strings.Fields(string(m[1]))
	code, out, errs := runCLI(t, args...)
	if code != 0 {
		t.Fatalf("mrlab %s: exit %d\n%s", m[1], code, errs)
	}
	_, faults, ok := strings.Cut(out, "Faults fired")
	fired := regexp.MustCompile(`(?m)^  \S+\s+.*\sok$`).FindAllString(faults, -1)
	if !ok || len(fired) != 8 || strings.Contains(faults, "not reached") {
		t.Errorf("mrlab %s: %d of the lab's 8 faults fired:\n%s", m[1], len(fired), faults)
	}
}
