//go:build race

package labs

// raceEnabled: the test binary runs under the race detector, which
// allocates on its own; allocation counts are skipped.
const raceEnabled = true
