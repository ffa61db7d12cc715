//go:build race

package main

// raceEnabled: the test binary runs under the race detector, whose shadow
// memory makes resident-set figures meaningless; they are skipped.
const raceEnabled = true
