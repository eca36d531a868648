//go:build !trellisplant

package plant

// Enabled reports whether this build can plant bugs.
const Enabled = false

// Active reports whether the named bug is planted: never, in this build.
func Active(string) bool { return false }
