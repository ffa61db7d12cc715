package sanitize

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestTerminal(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"perf-agent", "perf-agent"},
		{"", ""},
		{"ünïcödé 程序", "ünïcödé 程序"},
		{"a b\tc", `a b\x09c`},
		{"\x1b[2J\x1b[H", `\x1b[2J\x1b[H`},
		{"x\r\nh9  198.18.9.9", `x\x0d\x0ah9  198.18.9.9`},
		{"\x1b]0;pwned\x07", `\x1b]0;pwned\x07`},
		{"\u009b31m", `\u009b31m`},       // C1 CSI
		{"abc\u202edcb", `abc\u202edcb`}, // right-to-left override
		{"a\u200bb", `a\u200bb`},         // zero-width space
		{"a\u2028b", `a\u2028b`},         // line separator
		{`\x1b`, `\x1b`},                 // idempotent: text stays text
		{"\xff\xfeok", `\xff\xfeok`},     // invalid UTF-8
		{"\x7f", `\x7f`},
	} {
		if got := Terminal(c.in); got != c.want {
			t.Errorf("Terminal(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestHTML(t *testing.T) {
	if got, want := HTML("<img src=x onerror=alert(1)>\x1b"), `&lt;img src=x onerror=alert(1)&gt;\x1b`; got != want {
		t.Errorf("HTML = %q, want %q", got, want)
	}
}

func TestLines(t *testing.T) {
	if got, want := Lines("t=1 ok\nt=2 \x1b[31mred\r\n"), "t=1 ok\nt=2 \\x1b[31mred\\x0d\n"; got != want {
		t.Errorf("Lines = %q, want %q", got, want)
	}
}

// TestNoAllocs: a clean name costs nothing.
func TestNoAllocs(t *testing.T) {
	s := strings.Repeat("perf-agent ", 4)
	if n := testing.AllocsPerRun(100, func() { _ = Terminal(s) }); n != 0 {
		t.Errorf("Terminal of a clean string allocates %v times", n)
	}
}

// FuzzTerminal: the output is valid UTF-8 with no control or formatting
// rune, and clean input comes back unchanged.
func FuzzTerminal(f *testing.F) {
	for _, s := range []string{"a", "\x1b[2J", "\u202e", "\xff", `\`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := Terminal(s)
		if !utf8.ValidString(out) {
			t.Fatalf("Terminal(%q) = %q: invalid UTF-8", s, out)
		}
		for _, r := range out {
			if r < 0x20 || r == 0x7f || unsafeRune(r, utf8.RuneLen(r)) {
				t.Fatalf("Terminal(%q) = %q keeps %U", s, out, r)
			}
		}
		if again := Terminal(out); again != out {
			t.Fatalf("Terminal is not idempotent: %q -> %q -> %q", s, out, again)
		}
	})
}
