package primitives

import (
	"fmt"
	"strconv"
	"unicode/utf8"
)

// quotedKeyLen is how many bytes of a key an error message quotes; a longer key is cut there.
const quotedKeyLen = 100

// quoteKey returns key quoted for an error message, as %q would: a key longer than
// quotedKeyLen bytes is cut at a rune boundary within them (or, in invalid UTF-8, within the
// last utf8.UTFMax bytes of them) and marked with its length.
func quoteKey(key string) string {
	if len(key) <= quotedKeyLen {
		return strconv.Quote(key)
	}
	cut := quotedKeyLen
	for cut > quotedKeyLen-utf8.UTFMax+1 && !utf8.RuneStart(key[cut]) {
		cut--
	}
	return fmt.Sprintf("%q… (%d bytes)", key[:cut], len(key))
}

// checkKey returns an error wrapping ErrInvalid unless 1 <= len(key) <= most.
func checkKey(key string, most int) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: key: must not be empty", ErrInvalid)
	case len(key) > most:
		if most == MaxKeyLen {
			return fmt.Errorf("%w: key of %d bytes: must be at most %d (core.MaxKeyLen)", ErrInvalid, len(key), most)
		}
		return fmt.Errorf("%w: key of %d bytes: must be at most %d (core.MaxKeyLen less the %d bytes of a suffix it needs)",
			ErrInvalid, len(key), most, MaxKeyLen-most)
	}
	return nil
}
