package metaroce_test

import (
	"fmt"
	"testing"
)

// knownMiss reports a target this engine misses today, with the issue that
// works on it: the test is skipped with "KNOWN MISS" and the figures, so
// the suite stays green and scripts/test counts it in its summary. Use it
// only for a documented miss; anything else is t.Errorf.
func knownMiss(t *testing.T, issue, format string, args ...any) {
	t.Helper()
	t.Skipf("KNOWN MISS, fixed by %s: %s", issue, fmt.Sprintf(format, args...))
}
