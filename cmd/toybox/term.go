package main

import (
	"fmt"
	"io"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// termMax is the most of one field term prints, in bytes of its input: a
// status line holds a few sentences, and a field the size of a log would
// scroll the lines around it off the screen.
const termMax = 2000

// unsafeRune reports whether r, printed as it is, could act on the
// terminal or disguise the text around it: C0 and C1 controls and DEL
// (escape sequences, carriage returns, newlines that forge a line), and
// the format characters (bidi overrides and isolates such as U+202E,
// zero-width characters) and the line and paragraph separators.
func unsafeRune(r rune) bool {
	return r < 0x20 || r >= 0x7f && r < 0xa0 || r == '\u2028' || r == '\u2029' || unicode.Is(unicode.Cf, r)
}

// term renders s, a string the supervisor answered with (and so perhaps
// one a vat, a package or a network peer wrote), for a terminal: each
// unsafe rune and each byte that is not UTF-8 is shown escaped, as Go
// writes it in a string literal (\x1b, \r, \u202e), and past termMax
// bytes the rest is counted, not printed. Other text, é or 中文, is kept.
func term(s string) string {
	rest := 0
	if len(s) > termMax {
		cut := termMax
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s, rest = s[:cut], len(s)-cut
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case !unsafeRune(r):
			b.WriteString(s[i : i+n])
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x80:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r <= 0xffff:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, `\U%08x`, r)
		}
		i += n
	}
	if rest > 0 {
		fmt.Fprintf(&b, "… (%d bytes more)", rest)
	}
	return b.String()
}

// jsonForTerminal returns the JSON document j with each unsafe rune
// outside ASCII written as a \u escape: the same JSON, but a terminal
// shows it as text. (encoding/json already escapes the C0 controls; it
// leaves C1 controls and bidi overrides as they are.) Only a string can
// hold such a rune, and there \uXXXX means the same rune. DEL, the one
// unsafe ASCII byte encoding/json leaves, is escaped too.
func jsonForTerminal(j []byte) []byte {
	ascii := true
	for _, c := range j {
		if c >= utf8.RuneSelf || c == 0x7f {
			ascii = false
			break
		}
	}
	if ascii {
		return j // most records: nothing to escape, nothing to copy
	}
	out := make([]byte, 0, len(j))
	for i := 0; i < len(j); {
		r, n := utf8.DecodeRune(j[i:])
		if (r < utf8.RuneSelf && r != 0x7f) || !unsafeRune(r) {
			out = append(out, j[i:i+n]...)
			i += n
			continue
		}
		if r1, r2 := utf16.EncodeRune(r); r1 != utf8.RuneError {
			out = fmt.Appendf(out, `\u%04x\u%04x`, r1, r2)
		} else {
			out = fmt.Appendf(out, `\u%04x`, r)
		}
		i += n
	}
	return out
}

// terminalJSON writes JSON records to w through jsonForTerminal. A
// log/slog JSON handler escapes the C0 controls of a string it quotes, but
// not the C1 controls or a bidi override, which journalctl or a terminal
// then shows acting on the record's text.
type terminalJSON struct{ w io.Writer }

// Write writes p, one or more whole records, and returns len(p).
func (t terminalJSON) Write(p []byte) (int, error) {
	if _, err := t.w.Write(jsonForTerminal(p)); err != nil {
		return 0, err
	}
	return len(p), nil
}
