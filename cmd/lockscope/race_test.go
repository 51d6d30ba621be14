//go:build race

package main

// raceEnabled builds the binary under test with the race detector when the
// tests run with it: the packages are then already compiled that way, and
// the end-to-end runs check for races too.
const raceEnabled = true
