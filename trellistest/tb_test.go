package trellistest_test

import "github.com/trellis-repl/trellis-repl/trellistest"

// fails runs fn with s and returns the message it failed with ("" when it
// did not fail).
func fails(fn func()) (msg string) {
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(trellistest.Failure)
			if !ok {
				panic(r)
			}
			msg = f.Msg
		}
	}()
	fn()
	return ""
}
