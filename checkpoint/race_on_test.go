//go:build race

package checkpoint

// raceEnabled shrinks the heaviest tests under the race detector, which
// makes Pebble many times slower.
const raceEnabled = true
