package natural

import (
	"slices"
	"testing"
)

func TestCompare(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"", "h", -1},
		{"h2", "h10", -1},
		{"h10", "h2", 1},
		{"h01", "h1", 0},
		{"h0", "h00", 0},
		{"leaf1-p0", "leaf1-p1", -1},
		{"leaf9-p3", "leaf10-p0", -1},
		{"spine", "spine1", -1},
		{"a1b2", "a1b10", -1},
		{"h99999999999999999999", "h100000000000000000000", -1},
		{"h2", "x1", -1},
		{"H1", "h1", -1},
	} {
		if got := Compare(tc.a, tc.b); got != tc.want {
			t.Errorf("Compare(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
		if got := Compare(tc.b, tc.a); got != -tc.want {
			t.Errorf("Compare(%q, %q) = %d, want %d (antisymmetry)", tc.b, tc.a, got, -tc.want)
		}
	}
}

func TestSort(t *testing.T) {
	names := []string{"h10", "h1", "spine2", "h2", "leaf10", "leaf2", "spine10", "h0"}
	slices.SortFunc(names, Compare)
	want := []string{"h0", "h1", "h2", "h10", "leaf2", "leaf10", "spine2", "spine10"}
	if !slices.Equal(names, want) {
		t.Fatalf("sorted %v, want %v", names, want)
	}
}

func FuzzCompare(f *testing.F) {
	f.Add("h2", "h10")
	f.Add("a007b", "a7c")
	f.Fuzz(func(t *testing.T, a, b string) {
		if Compare(a, a) != 0 {
			t.Fatalf("Compare(%q, itself) != 0", a)
		}
		if Compare(a, b) != -Compare(b, a) {
			t.Fatalf("Compare not antisymmetric on %q, %q", a, b)
		}
	})
}
