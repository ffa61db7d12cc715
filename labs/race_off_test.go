//go:build !race

package labs

// raceEnabled: see race_on_test.go.
const raceEnabled = false
