package dlock

import (
	"fmt"
	"unicode/utf8"
)

// MaxNameLen is the longest lock name, in bytes.
const MaxNameLen = 1024

// ValidateName checks the naming rule: 1..1024 bytes of valid UTF-8. Any
// such string is a valid name on every backend; backends with a narrower key
// space escape or hash it.
func ValidateName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: the name is empty; it must be 1..%d bytes of UTF-8", ErrInvalidName, MaxNameLen)
	case len(name) > MaxNameLen:
		return fmt.Errorf("%w: the name is %d bytes; the limit is %d", ErrInvalidName, len(name), MaxNameLen)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: the name is not valid UTF-8", ErrInvalidName)
	}
	return nil
}
