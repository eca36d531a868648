// Package clibuild names the trellis-repl binary that tests run as a
// child process when one was built beforehand: `make test` builds
// bin/trellis-repl once and passes it in TRELLIS_TEST_CLI, so that the
// packages that run the CLI (the root package, bench, generative,
// internal/scaletest) do not each link their own copy (about 8 s of CPU
// apiece).
package clibuild

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/trellis-repl/trellis-repl/internal/plant"
)

// EnvVar names the environment variable holding the prebuilt binary.
const EnvVar = "TRELLIS_TEST_CLI"

// Prebuilt returns the binary in TRELLIS_TEST_CLI, or "" when the caller
// must build its own: the variable is unset, or this is a build that can
// plant bugs (a prebuilt binary has none planted).
func Prebuilt() (string, error) {
	p := os.Getenv(EnvVar)
	if p == "" || plant.Enabled {
		return "", nil
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", fmt.Errorf("%s=%q: %w", EnvVar, p, err)
	}
	if st, err := os.Stat(abs); err != nil || st.IsDir() {
		return "", fmt.Errorf("%s=%q is not a trellis-repl binary (build it with make build): %v", EnvVar, p, err)
	}
	return abs, nil
}
