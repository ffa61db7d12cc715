package tee

import (
	"strings"
	"testing"
)

type namer interface{ Name() string }

type name string

func (n name) Name() string { return string(n) }

// many is a fan-out: its name lists its members' names.
type many []namer

func (m many) Name() string {
	var s []string
	for _, n := range m {
		s = append(s, n.Name())
	}
	return "[" + strings.Join(s, " ") + "]"
}

func TestJoin(t *testing.T) {
	for _, tc := range []struct {
		in   []namer
		want string // "" for nil
	}{
		{nil, ""},
		{[]namer{nil, nil}, ""},
		{[]namer{nil, name("a")}, "a"},                // unwrapped
		{[]namer{name("a"), nil, name("b")}, "[a b]"}, // in order, nil dropped
		{[]namer{name("b"), name("a"), name("c")}, "[b a c]"},
	} {
		got := Join(func(k []namer) namer { return many(k) }, tc.in...)
		if got == nil {
			if tc.want != "" {
				t.Errorf("%v: nil, want %s", tc.in, tc.want)
			}
			continue
		}
		if got.Name() != tc.want {
			t.Errorf("%v: %s, want %s", tc.in, got.Name(), tc.want)
		}
	}
}
