// Package terr defines the error type every trellis-repl layer returns to
// callers: a stable machine-readable code plus a sentence that names the
// object at fault and the fix.
package terr

import (
	"errors"
	"fmt"
)

// Code is a stable error class that scripts and programs can branch on.
type Code string

// The stable codes (README.md: "codes are stable").
const (
	Validation  Code = "validation"
	NotFound    Code = "not_found"
	Conflict    Code = "conflict"
	Timeout     Code = "timeout"
	Unavailable Code = "unavailable"
	Internal    Code = "internal"
)

// Error is an error with a stable code and a human sentence. Err, when set, is
// the underlying cause and is reachable through errors.Unwrap.
type Error struct {
	Code Code
	Msg  string
	Err  error
}

// Error returns "code: sentence".
func (e *Error) Error() string {
	if e.Err != nil && e.Msg == "" {
		return fmt.Sprintf("%s: %v", e.Code, e.Err)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Msg)
}

// Unwrap exposes the cause.
func (e *Error) Unwrap() error { return e.Err }

// New builds an Error with a formatted sentence.
func New(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// Wrap builds an Error with a sentence and a cause.
func Wrap(code Code, err error, format string, args ...any) *Error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...), Err: err}
}

// CodeOf returns the code of the first *Error in err's chain, or Internal.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return Internal
}
