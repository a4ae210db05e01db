//go:build race

package scram

// raceEnabled: the race detector makes PBKDF2 about five times slower.
const raceEnabled = true
