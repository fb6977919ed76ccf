package rediscore

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrLayoutVersion is what the error of a call that met data or a Functions library of another
// layout version wraps (errors.Is): the Store changed nothing, and it refuses every call on that
// key (or, for the library, on that server) until no Store of the other version uses it.
var ErrLayoutVersion = errors.New("stored layout of another version")

// LayoutError is the error of a call that met another layout version (see ErrLayoutVersion):
// Where is the Redis key or the library, Found the version it holds ("none" for a layout from
// before versions were written), Speaks the version of this Store (LayoutVersion).
type LayoutError struct {
	Where  string
	Found  string
	Speaks int
}

// Error names where, the version found and the version spoken.
func (e *LayoutError) Error() string {
	return fmt.Sprintf("%s is of layout %s, this Store speaks layout %d: %v", e.Where, e.Found, e.Speaks, ErrLayoutVersion)
}

// Is reports whether target is ErrLayoutVersion.
func (e *LayoutError) Is(target error) bool { return target == ErrLayoutVersion }

// layoutPrefix starts the error reply of a script that met another layout (other_layout in
// common.lua): "LAYOUT leasehold: <key> is of layout <found>, this Store speaks layout <n>; ...".
const layoutPrefix = "LAYOUT leasehold: "

// layoutError returns the *LayoutError an error reply of a script says, or nil when err is not
// one. It reads the reply from its end, so that a key holding the same words is read whole.
func layoutError(err error) *LayoutError {
	if err == nil {
		return nil
	}
	msg := err.Error()
	i := strings.Index(msg, layoutPrefix)
	if i < 0 {
		return nil
	}
	msg = msg[i+len(layoutPrefix):]
	j := strings.LastIndex(msg, " is of layout ")
	k := strings.LastIndex(msg, ", this Store speaks layout ")
	if j < 0 || k < j {
		return nil
	}
	return &LayoutError{Where: msg[:j], Found: msg[j+len(" is of layout ") : k], Speaks: LayoutVersion}
}

// libraryLayout returns the *LayoutError of a server whose library is of version found.
func libraryLayout(found int64) *LayoutError {
	return &LayoutError{Where: "the Redis Functions library " + LibraryName, Found: strconv.FormatInt(found, 10), Speaks: LayoutVersion}
}
