//go:build !race

package verbs_test

// raceEnabled: see race_on_test.go.
const raceEnabled = false
