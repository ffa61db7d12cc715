// Package sanitize makes strings that come from a lab host safe to show
// the operator: program names from a verbs HELLO, process names, trace
// lines and anything else a program in a host can choose. A host is
// untrusted; what it names must not move the operator's cursor, clear
// the screen, set the terminal's title, reorder text (bidirectional
// overrides), start a new line that looks like the tool's own output, or
// inject markup into a web page.
//
// Terminal escapes every byte and rune that a terminal would interpret
// rather than print, so the result shows what was sent as text on one
// line. It is idempotent (Terminal(Terminal(s)) == Terminal(s)), so a
// string sanitized where it enters the lab (a HELLO's program name) and
// again where it is shown reads the same; the price is that a host can
// write the four characters \x1b itself, which shows as text and
// moves nothing. HTML additionally escapes markup. Both return s itself,
// without allocating, when nothing needs escaping.
package sanitize

import (
	"fmt"
	"html"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Terminal returns s with every control character (C0, DEL, C1), every
// invisible formatting rune (bidirectional overrides and isolates,
// zero-width characters: Unicode category Cf), line and paragraph
// separators, and every byte that is not valid UTF-8 written as a Go
// escape (\x1b, \u202e). Printable text, in any script, is unchanged.
func Terminal(s string) string {
	i := 0
	for i < len(s) {
		c := s[i]
		if c >= 0x20 && c < 0x7f {
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if c >= utf8.RuneSelf && !unsafeRune(r, n) {
			i += n
			continue
		}
		break
	}
	if i == len(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	b.WriteString(s[:i])
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r < 0x80 && (r < 0x20 || r == 0x7f):
			fmt.Fprintf(&b, `\x%02x`, r)
		case unsafeRune(r, n):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// unsafeRune reports whether a non-ASCII rune must be escaped.
func unsafeRune(r rune, n int) bool {
	switch {
	case r == utf8.RuneError && n == 1:
		return true
	case r >= 0x80 && r < 0xa0: // C1 controls (CSI is 0x9b)
		return true
	case r == '\u2028' || r == '\u2029':
		return true
	}
	return unicode.Is(unicode.Cf, r) || !unicode.IsPrint(r) && !unicode.IsSpace(r)
}

// HTML returns Terminal(s) with HTML's special characters escaped, for
// text placed in an HTML page outside a script.
func HTML(s string) string { return html.EscapeString(Terminal(s)) }

// Lines is Terminal for text of several lines (a stream of trace lines):
// each line is escaped, the newlines between them kept. A carriage return
// is escaped: it could overwrite the line it ends.
func Lines(s string) string {
	if !strings.ContainsFunc(s, func(r rune) bool { return r != '\n' && (r < 0x20 || r >= 0x7f) }) {
		return s
	}
	parts := strings.Split(s, "\n")
	for i, p := range parts {
		parts[i] = Terminal(p)
	}
	return strings.Join(parts, "\n")
}
