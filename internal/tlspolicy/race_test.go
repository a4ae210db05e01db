//go:build race

package tlspolicy

// raceEnabled: the race detector makes the chain's checks (parsing, hashing, maps) several
// times slower.
const raceEnabled = true
