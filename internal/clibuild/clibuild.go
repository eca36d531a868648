// Package clibuild names the trellis-repl binary that tests run as a
// child process when one was built beforehand: `make test` builds
// bin/trellis-repl once and passes it in TRELLIS_TEST_CLI, so that the
// packages that run the CLI (the root package, bench, generative,
// internal/scaletest) do not each link their own copy (about 8 s of CPU
// apiece).
package clibuild

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

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

// Build returns Prebuilt's binary when there is one, else builds
// cmd/trellis-repl into dir (with the trellisplant tag when this build has
// it, so that a planted bug is planted in the child too). The caller's
// working directory must be inside the module, as a test's is.
func Build(ctx context.Context, dir string) (string, error) {
	if bin, err := Prebuilt(); bin != "" || err != nil {
		return bin, err
	}
	bin := filepath.Join(dir, "trellis-repl")
	args := []string{"build", "-o", bin}
	if plant.Enabled {
		args = append(args, "-tags", "trellisplant")
	}
	args = append(args, "github.com/trellis-repl/trellis-repl/cmd/trellis-repl")
	if out, err := exec.CommandContext(ctx, "go", args...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return bin, nil
}
