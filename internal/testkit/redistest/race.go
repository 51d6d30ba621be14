//go:build race

package redistest

// raceEnabled builds the lockscope binary with the race detector when the
// tests run with it: the packages are then already compiled that way, and
// the end-to-end runs check the binary for races too.
const raceEnabled = true
