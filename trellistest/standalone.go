package trellistest

import (
	"fmt"
	"os"
)

// Standalone is a TB for code that runs outside a test function: an
// Example, a tool, a demo. Fatalf panics with a Failure; the cleanups run
// at Close, last registered first.
type Standalone struct {
	name     string
	cleanups []func()
}

// NewStandalone returns a Standalone whose databases are named after name.
func NewStandalone(name string) *Standalone { return &Standalone{name: name} }

// Failure is what Standalone.Fatalf panics with.
type Failure struct{ Msg string }

func (f Failure) Error() string { return f.Msg }

// Helper does nothing: there is no test to attribute lines to.
func (s *Standalone) Helper() {}

// Name is the name given to NewStandalone.
func (s *Standalone) Name() string { return s.name }

// Cleanup registers fn to run at Close.
func (s *Standalone) Cleanup(fn func()) { s.cleanups = append(s.cleanups, fn) }

// Logf writes to standard error.
func (s *Standalone) Logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
}

// Fatalf panics with a Failure carrying the message.
func (s *Standalone) Fatalf(format string, args ...any) {
	panic(Failure{Msg: fmt.Sprintf(format, args...)})
}

// TempDir makes a directory removed at Close.
func (s *Standalone) TempDir() string {
	d, err := os.MkdirTemp("", "trellistest")
	if err != nil {
		s.Fatalf("trellistest: %v", err)
	}
	s.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// Close runs the cleanups, last registered first.
func (s *Standalone) Close() {
	for i := len(s.cleanups) - 1; i >= 0; i-- {
		s.cleanups[i]()
	}
	s.cleanups = nil
}
