package cli

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/leasehold/leasehold/core"
)

// valueFlag is run's -value flag: set tells an empty value given from none.
type valueFlag struct {
	s   string
	set bool
}

// String returns the value given, as flag.Value asks.
func (v *valueFlag) String() string {
	if v == nil {
		return ""
	}
	return v.s
}

// Set records the value given, as flag.Value asks.
func (v *valueFlag) Set(s string) error {
	v.s, v.set = s, true
	return nil
}

// defaultValue is the value `leasehold run` keeps with its lease unless -value is given: this
// host, this process's pid and the command, as in "host-a pid 4242: make deploy", cut to fit
// core.MaxValueLen.
func defaultValue(command []string) string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	return fitValue(fmt.Sprintf("%s pid %d: %s", host, os.Getpid(), shellJoin(command)))
}

// fitValue returns s if it fits core.MaxValueLen bytes, and otherwise its longest prefix that
// fits with "…" after it, cut on a UTF-8 boundary.
func fitValue(s string) string {
	if len(s) <= core.MaxValueLen {
		return s
	}
	cut := core.MaxValueLen - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// shellJoin joins args as a POSIX shell would read them back: an argument with anything but
// letters, digits and @%+=:,./_- in it is single-quoted.
func shellJoin(args []string) string {
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = a
		if a == "" || strings.ContainsFunc(a, func(r rune) bool {
			return !(r < utf8.RuneSelf && (unicode.IsLetter(r) || unicode.IsDigit(r) || strings.ContainsRune("@%+=:,./_-", r)))
		}) {
			quoted[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(quoted, " ")
}

// quoteValue returns v as a Go string literal (so that a newline or a control character in it
// cannot make a line of its own) of at most width runes: when the whole does not fit, the
// literal of its longest prefix that does, followed by "…".
func quoteValue(v string, width int) string {
	q := strconv.Quote(v)
	if utf8.RuneCountInString(q) <= width {
		return q
	}
	var b strings.Builder
	n := 2 + 1 // the quotes and the ellipsis
	for i, w := 0, 0; i < len(v); i += w {
		_, w = utf8.DecodeRuneInString(v[i:])
		piece := strconv.Quote(v[i : i+w])
		piece = piece[1 : len(piece)-1]
		if n+utf8.RuneCountInString(piece) > width {
			break
		}
		n += utf8.RuneCountInString(piece)
		b.WriteString(piece)
	}
	return `"` + b.String() + `"…`
}

// plainOrQuoted returns s as it is when it is printable with no space or quote in it (a holder
// id leasehold made, say), and quoted otherwise, so that no id can forge a line or a column.
func plainOrQuoted(s string) string {
	if s == "" || strings.ContainsFunc(s, func(r rune) bool {
		return !unicode.IsGraphic(r) || unicode.IsSpace(r) || r == '"' || r == utf8.RuneError
	}) {
		return strconv.Quote(s)
	}
	return s
}
