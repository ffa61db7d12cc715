package metaroce_test

import (
	"fmt"
	"os"
	"testing"
)

// knownMiss reports a target this engine misses today, with the issue that
// works on it: the test is skipped with "KNOWN MISS" and the figures, so
// the suite stays green, and named in the file $MRLAB_KNOWN_MISSES (if
// set), which scripts/test lists in its last line. Use it only for a
// documented miss; anything else is t.Errorf.
func knownMiss(t *testing.T, issue, format string, args ...any) {
	t.Helper()
	noteKnownMiss(t.Name(), issue)
	t.Skipf("KNOWN MISS, fixed by %s: %s", issue, fmt.Sprintf(format, args...))
}

// noteKnownMiss appends "transport/metaroce NAME (ISSUE)" to
// $MRLAB_KNOWN_MISSES; one short append per miss, so parallel test
// processes do not interleave within a line.
func noteKnownMiss(name, issue string) {
	path := os.Getenv("MRLAB_KNOWN_MISSES")
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return // the summary is a convenience; the skip says it all
	}
	defer f.Close()
	fmt.Fprintf(f, "transport/metaroce %s (%s)\n", name, issue)
}
