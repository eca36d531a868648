//go:build trellisplant

package plant

import "os"

// Enabled reports whether this build can plant bugs.
const Enabled = true

// Active reports whether the named bug is planted in this process.
func Active(name string) bool { return os.Getenv(EnvVar) == name }
